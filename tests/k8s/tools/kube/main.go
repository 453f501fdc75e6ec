// A multi-call binary of the Kubernetes components the test cluster runs,
// chosen by the name it is called by (argv[0]) or by its first argument.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	cmds := map[string]func() *cobra.Command{
		"kube-apiserver":          apiserver.NewAPIServerCommand,
		"kube-controller-manager": controllermanager.NewControllerManagerCommand,
		"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
		"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
		"kube-proxy":              proxy.NewProxyCommand,
		"kubectl":                 kubectl.NewDefaultKubectlCommand,
	}
	name := filepath.Base(os.Args[0])
	if name == "etcd" || (len(os.Args) > 1 && os.Args[1] == "etcd") {
		if name != "etcd" {
			os.Args = os.Args[1:]
		}
		etcdmain.Main(os.Args)
		return
	}
	if _, ok := cmds[name]; !ok && len(os.Args) > 1 {
		name = os.Args[1]
		os.Args = os.Args[1:]
	}
	mk, ok := cmds[name]
	if !ok {
		fmt.Fprintln(os.Stderr, "usage: kube {etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy|kubectl} [flags]")
		os.Exit(2)
	}
	os.Exit(cli.Run(mk()))
}
