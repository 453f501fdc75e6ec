// Command pcsi-operator-cmdlines prints the command lines that Intel
// PMEM-CSI v1.1.0's operator gives the driver containers it creates, one
// JSON object per container, for PmemCSIDeployment objects that vary every
// spec field the command lines depend on (device mode, log level and format,
// PMEM percentage, node selector). It runs the operator's own reconciler
// (pkg/pmem-csi-operator/controller/deployment) against controller-runtime's
// fake client and reads the DaemonSets and Deployments it created.
//
// It is built inside Intel's released source by scripts/go-tools.sh (tool
// intel-operator-cmdlines), which copies this file there; the test
// tests/manifests/test_intel_cmdlines.py starts our driver with each line.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/intel/pmem-csi/pkg/apis"
	api "github.com/intel/pmem-csi/pkg/apis/pmemcsi/v1beta1"
	pmemcontroller "github.com/intel/pmem-csi/pkg/pmem-csi-operator/controller"
	"github.com/intel/pmem-csi/pkg/pmem-csi-operator/controller/deployment"
	"github.com/intel/pmem-csi/pkg/version"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cgfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

const namespace = "pmem-csi"
const image = "pmem-csi-under-test:latest"

type line struct {
	Spec      map[string]interface{} `json:"spec"`
	Object    string                 `json:"object"`
	Container string                 `json:"container"`
	Command   []string               `json:"command"`
	Args      []string               `json:"args"`
	Env       map[string]string      `json:"env"`
}

func containers(objName string, pod corev1.PodSpec, spec map[string]interface{}, out *json.Encoder) {
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		if c.Image != image {
			continue
		}
		env := map[string]string{}
		for _, e := range c.Env {
			if e.ValueFrom != nil {
				env[e.Name] = "$FIELD:" + e.ValueFrom.FieldRef.FieldPath
			} else {
				env[e.Name] = e.Value
			}
		}
		if err := out.Encode(line{spec, objName, c.Name, c.Command, c.Args, env}); err != nil {
			panic(err)
		}
	}
}

func main() {
	ctx := context.Background()
	if err := apis.AddToScheme(scheme.Scheme); err != nil {
		panic(err)
	}
	out := json.NewEncoder(os.Stdout)
	n := 0
	for _, mode := range []api.DeviceMode{api.DeviceModeLVM, api.DeviceModeDirect} {
		for _, format := range []api.LogFormat{"", api.LogFormatText, api.LogFormatJSON} {
			for _, level := range []uint16{0, 1, 5} {
				for _, pct := range []uint16{0, 50, 100} {
					for _, sel := range []map[string]string{nil, {"storage": "pmem", "zone": "a-1"}} {
						n++
						name := fmt.Sprintf("pmem-csi-%d.example.com", n)
						dep := &api.PmemCSIDeployment{
							TypeMeta:   metav1.TypeMeta{Kind: "PmemCSIDeployment", APIVersion: api.SchemeGroupVersion.String()},
							ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprintf("uid-%d", n))},
							Spec: api.DeploymentSpec{DeviceMode: mode, LogFormat: format, LogLevel: level,
								PMEMPercentage: pct, NodeSelector: sel, Image: image},
						}
						spec := map[string]interface{}{"deviceMode": mode, "logFormat": format, "logLevel": level,
							"pmemPercentage": pct, "nodeSelector": sel}
						c := fake.NewClientBuilder().WithRuntimeObjects(dep).Build()
						r, err := deployment.NewReconcileDeployment(ctx, c, pmemcontroller.ControllerOptions{
							Namespace:    namespace,
							K8sVersion:   version.NewVersion(1, 25),
							DriverImage:  image,
							EventsClient: cgfake.NewSimpleClientset().CoreV1().Events(metav1.NamespaceDefault),
						})
						if err != nil {
							panic(err)
						}
						if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}}); err != nil {
							panic(err)
						}
						var dss appsv1.DaemonSetList
						var deps appsv1.DeploymentList
						if err := c.List(ctx, &dss, client.InNamespace(namespace)); err != nil {
							panic(err)
						}
						if err := c.List(ctx, &deps, client.InNamespace(namespace)); err != nil {
							panic(err)
						}
						for _, ds := range dss.Items {
							containers("DaemonSet/"+ds.Name, ds.Spec.Template.Spec, spec, out)
						}
						for _, d := range deps.Items {
							containers("Deployment/"+d.Name, d.Spec.Template.Spec, spec, out)
						}
					}
				}
			}
		}
	}
}
