/* The floor of `cleanroom run -- CMD` for scripts/bench (pairs floor-tmp, floor-tmpfs): the
 * kernel work a run cannot do without, and nothing else, in a small static C program.
 *
 *   bench-floor NAMESPACE CMD [ARGS...]
 *
 * What it does is what a default run does as root (cgroup rung, `--protect home`):
 *   - a root in NAMESPACE: `.pending-run-PID` made, its marker written (no fsync), home, tmp,
 *     xdg, xdg/runtime made, renamed to `run-PID`; removed again at the end;
 *   - a cgroup leaf made under the cgroup2 mount (skipped, and said on stderr, where it cannot be),
 *     CMD born in it (clone3 CLONE_INTO_CGROUP), `cgroup.events` read after, the leaf removed;
 *   - a watchdog process (forked) told `D` when the run is over, then reaped;
 *   - CMD in a process group of its own, a private mount namespace (`/` a slave, a fresh tmpfs on
 *     /dev/shm), no_new_privs and a Landlock ruleset with one rule per entry of `/` but the one
 *     holding $HOME (about as many rules as run's home cover here), built in the parent.
 * What a run does beyond that (its configuration, environment, lock, leak check, report) is not
 * here: `cleanroom run` can only be slower than this. Exit status: CMD's, or 125 on a failure.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define WRITE_RIGHTS                                                                          \
    (LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |                          \
     LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |                          \
     LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK | \
     LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM)

static void die(const char *what) {
    fprintf(stderr, "bench-floor: %s: %s\n", what, strerror(errno));
    exit(125);
}

/* A Landlock ruleset: write rights beneath every entry of `/` but the one holding $HOME. */
static int ruleset(void) {
    const char *home = getenv("HOME");
    size_t skip = 0;
    if (home && home[0] == '/') skip = strcspn(home + 1, "/");
    struct landlock_ruleset_attr attr = {.handled_access_fs = WRITE_RIGHTS};
    int rules = syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (rules < 0) die("landlock_create_ruleset");
    DIR *root = opendir("/");
    if (!root) die("opendir /");
    struct dirent *entry;
    while ((entry = readdir(root))) {
        if (entry->d_name[0] == '.') continue;
        if (skip && strlen(entry->d_name) == skip && !strncmp(entry->d_name, home + 1, skip))
            continue;
        int fd = openat(dirfd(root), entry->d_name, O_PATH | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat st;
        fstat(fd, &st);
        struct landlock_path_beneath_attr rule = {
            .allowed_access = S_ISDIR(st.st_mode) ? WRITE_RIGHTS : LANDLOCK_ACCESS_FS_WRITE_FILE,
            .parent_fd = fd};
        if (syscall(SYS_landlock_add_rule, rules, LANDLOCK_RULE_PATH_BENEATH, &rule, 0))
            die("landlock_add_rule");
        close(fd);
    }
    closedir(root);
    return rules;
}

/* The cgroup2 mount root, or NULL. */
static const char *cgroup2(void) {
    static const char *places[] = {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"};
    for (unsigned i = 0; i < 2; i++) {
        char probe[64];
        snprintf(probe, sizeof probe, "%s/cgroup.procs", places[i]);
        if (geteuid() == 0 && access(probe, W_OK) == 0) return places[i];
    }
    return NULL;
}

static void child(char **argv, int rules) {
    setpgid(0, 0);
    if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) ||
        mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"))
        die("private mount namespace");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || syscall(SYS_landlock_restrict_self, rules, 0))
        die("landlock_restrict_self");
    execvp(argv[0], argv);
    die(argv[0]);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench-floor NAMESPACE CMD [ARGS...]\n");
        return 125;
    }
    char pending[4096], root[4096], leaf[4096];
    snprintf(pending, sizeof pending, "%s/.pending-run-%d", argv[1], getpid());
    snprintf(root, sizeof root, "%s/run-%d", argv[1], getpid());
    if (mkdir(pending, 0700)) die("mkdir the root");
    int dir = open(pending, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int marker = openat(dir, "cleanroom-root.json", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    char record[400];
    int len = snprintf(record, sizeof record, "{\"format\":\"bench-floor\",\"pid\":%d}", getpid());
    if (marker < 0 || write(marker, record, len) != len) die("write the marker");
    close(marker);
    if (mkdirat(dir, "home", 0700) || mkdirat(dir, "tmp", 0700) || mkdirat(dir, "xdg", 0700) ||
        mkdirat(dir, "xdg/runtime", 0700) || rename(pending, root))
        die("make the root");

    const char *mount2 = cgroup2();
    int cgroup = -1;
    if (mount2) {
        snprintf(leaf, sizeof leaf, "%s/bench-floor-%d", mount2, getpid());
        if (mkdir(leaf, 0755)) die("mkdir the cgroup leaf");
        cgroup = open(leaf, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    } else {
        fprintf(stderr, "bench-floor: no cgroup2 leaf (not root or no cgroup2 mount)\n");
    }

    int watch[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, watch)) die("socketpair");
    pid_t watchdog = fork();
    if (watchdog == 0) {
        char done;
        close(watch[0]);
        _exit(read(watch[1], &done, 1) == 1 ? 0 : 1);
    }
    close(watch[1]);

    int rules = ruleset();
    struct clone_args args = {.exit_signal = SIGCHLD};
    if (cgroup >= 0) {
        args.flags = CLONE_INTO_CGROUP;
        args.cgroup = cgroup;
    }
    pid_t pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid < 0) die("clone3");
    if (pid == 0) child(argv + 2, rules);
    close(rules);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}

    if (cgroup >= 0) {
        char events[128];
        int fd = openat(cgroup, "cgroup.events", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || read(fd, events, sizeof events) < 0) die("read cgroup.events");
        close(fd);
        close(cgroup);
        if (rmdir(leaf)) die("rmdir the cgroup leaf");
    }
    if (write(watch[0], "D", 1) != 1) die("tell the watchdog");
    if (unlinkat(dir, "home", AT_REMOVEDIR) || unlinkat(dir, "tmp", AT_REMOVEDIR) ||
        unlinkat(dir, "xdg/runtime", AT_REMOVEDIR) || unlinkat(dir, "xdg", AT_REMOVEDIR) ||
        unlinkat(dir, "cleanroom-root.json", 0) || rmdir(root))
        die("remove the root");
    close(dir);
    while (waitpid(watchdog, NULL, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
