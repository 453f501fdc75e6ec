/* pause.c: the sandbox ("pause") container of the test cluster's pods: holds
 * the pod's namespaces, reaps orphans, exits 0 on SIGINT or SIGTERM. Built
 * statically by tests/k8s/images.py (nothing is pulled). */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig)
{
	_exit(0);
}

static void on_child(int sig)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(void)
{
	struct sigaction sa = { 0 };

	sa.sa_handler = on_stop;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = on_child;
	sa.sa_flags = SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);
	for (;;)
		pause();
}
