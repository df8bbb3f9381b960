/*
 * pause: the first process of every pod sandbox on the one-node cluster (e2e/cluster.sh).
 * It holds the pod's namespaces open and does nothing else: sleeps in pause(), exits 0 on
 * SIGINT/SIGTERM (the runtime stopping the sandbox), and reaps any child re-parented to it
 * (it is pid 1 of a shared pid namespace) so no zombie outlives its container.
 *
 * Built static by e2e/node/images.py (gcc -static), the only file of the pause image.
 */
#include <signal.h>
#include <stdio.h>
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

int main(void) {
    struct sigaction stop = {.sa_handler = on_stop};
    struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
    sigemptyset(&stop.sa_mask);
    sigemptyset(&child.sa_mask);
    if (sigaction(SIGINT, &stop, NULL) || sigaction(SIGTERM, &stop, NULL) ||
        sigaction(SIGCHLD, &child, NULL)) {
        perror("pause: sigaction");
        return 1;
    }
    if (getpid() != 1) {
        fprintf(stderr, "pause: warning: not pid 1\n");
    }
    for (;;) {
        pause();
    }
}
