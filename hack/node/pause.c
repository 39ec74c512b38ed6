/*
 * pause: the sandbox (infra) process of the local node's pods.
 *
 * It holds the pod's namespaces open and does nothing else: it sleeps in
 * pause(), reaps any child re-parented to it (it is PID 1 of the pod when the
 * pod shares its PID namespace), and exits 0 on SIGINT or SIGTERM. Built
 * statically by hack/build-node.sh and packed into the sandbox image by
 * localcluster/images.py, because no registry can serve registry.k8s.io/pause.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
    (void)sig;
    _exit(0);
}

static void on_child(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(int argc, char **argv) {
    struct sigaction stop, child;

    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        puts("pause (dra-driver local node)");
        return 0;
    }
    if (getpid() != 1) {
        fprintf(stderr, "pause: warning: not running as PID 1\n");
    }
    memset(&stop, 0, sizeof(stop));
    stop.sa_handler = on_stop;
    if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    memset(&child, 0, sizeof(child));
    child.sa_handler = on_child;
    child.sa_flags = SA_NOCLDSTOP;
    if (sigaction(SIGCHLD, &child, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    for (;;) {
        pause();
    }
}
