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
 *   - CMD in a process group of its own, a private mount and IPC namespace (`/` a slave, a fresh
 *     tmpfs on /dev/shm, the IPC namespace's mqueue filesystem mounted detached and granted), a
 *     private /tmp and /var/tmp (an overlay of the host's with upper and work directories made in
 *     the root when it holds entries, else a bind of an empty directory of the root; the namespace
 *     kept the host's when it lies beneath, as the listening sockets and mounts there are looked
 *     up in /proc), CAP_SYS_ADMIN dropped from the bounding set, no_new_privs and a Landlock
 *     ruleset with one rule per entry of `/` but the one holding $HOME (about as many rules as
 *     run's home cover here), built in the parent, and rules on the private mounts added after.
 * What a run does beyond that (its configuration, environment, lock, leak check, report) is not
 * here: `cleanroom run` can only be slower than this. Exit status: CMD's, or 125 on a failure.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <linux/mount.h>
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

/* A private directory of the run: PATH (/tmp, /var/tmp) over UPPER (an overlay with WORK when
 * the host's holds entries, else a bind). */
struct private_dir {
    const char *path;
    char upper[4096], work[4096], options[12400];
    int overlay;
};

/* Plans and makes the backing of PATH in the root DIR (at ROOT). */
static void plan_private(struct private_dir *p, const char *path, int dir, const char *root,
                         const char *name) {
    p->path = path;
    DIR *host = opendir(path);
    struct dirent *entry;
    p->overlay = 0;
    while (host && (entry = readdir(host)))
        if (strcmp(entry->d_name, ".") && strcmp(entry->d_name, "..")) p->overlay = 1;
    if (host) closedir(host);
    snprintf(p->upper, sizeof p->upper, "%s/%s", root, name);
    snprintf(p->work, sizeof p->work, "%s/%s.work", root, name);
    if (mkdirat(dir, name, 01777) || chmod(p->upper, 01777)) die("mkdir the private directory");
    if (p->overlay && mkdir(p->work, 0700)) die("mkdir the overlay work directory");
    snprintf(p->options, sizeof p->options, "lowerdir=%s,upperdir=%s,workdir=%s,volatile", path,
             p->upper, p->work);
}

static void mount_private(struct private_dir *p) {
    if (p->overlay ? mount("overlay", p->path, "overlay", MS_NOSUID | MS_NODEV, p->options)
                   : mount(p->upper, p->path, NULL, MS_BIND, NULL))
        die(p->path);
}

/* What the private /tmp looks up in the parent: the listening sockets and the mounts there. */
static void discover(void) {
    char buf[65536];
    for (const char *file = "/proc/net/unix"; file; file = file[6] == 'n' ? "/proc/self/mountinfo" : 0) {
        int fd = open(file, O_RDONLY | O_CLOEXEC);
        while (fd >= 0 && read(fd, buf, sizeof buf) > 0) {}
        if (fd >= 0) close(fd);
    }
}

/* A Landlock write rule on the directory PATH (or the descriptor FD when PATH is NULL). */
static void grant(int rules, const char *path, int fd) {
    if (path) fd = open(path, O_PATH | O_CLOEXEC);
    struct landlock_path_beneath_attr rule = {.allowed_access = WRITE_RIGHTS, .parent_fd = fd};
    if (fd < 0 || syscall(SYS_landlock_add_rule, rules, LANDLOCK_RULE_PATH_BENEATH, &rule, 0))
        die("landlock_add_rule on a private mount");
    close(fd);
}

static void child(char **argv, int rules, const char *ns, struct private_dir *dirs) {
    setpgid(0, 0);
    if (unshare(CLONE_NEWNS | CLONE_NEWIPC) || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL))
        die("private mount and IPC namespace");
    int kept = strncmp(ns, "/tmp/", 5) ? -1
                                         : syscall(SYS_open_tree, AT_FDCWD, ns,
                                                   OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    mount_private(&dirs[1]); /* /var/tmp first: /tmp holds the root */
    mount_private(&dirs[0]);
    if (kept >= 0 && syscall(SYS_move_mount, kept, "", AT_FDCWD, ns, MOVE_MOUNT_F_EMPTY_PATH))
        die("keep the namespace");
    /* After the private directories, whose backing may lie in the host's /dev/shm. */
    if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"))
        die("private /dev/shm");
    int context = syscall(SYS_fsopen, "mqueue", FSOPEN_CLOEXEC);
    if (context < 0 || syscall(SYS_fsconfig, context, FSCONFIG_CMD_CREATE, NULL, NULL, 0))
        die("mqueue");
    int mqueue = syscall(SYS_fsmount, context, FSMOUNT_CLOEXEC, 0);
    if (mqueue < 0) die("fsmount mqueue");
    close(context);
    grant(rules, "/tmp", -1);
    grant(rules, "/var/tmp", -1);
    grant(rules, NULL, mqueue);
    if (prctl(PR_CAPBSET_DROP, 21 /* CAP_SYS_ADMIN */, 0, 0, 0)) die("drop CAP_SYS_ADMIN");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || syscall(SYS_landlock_restrict_self, rules, 0))
        die("landlock_restrict_self");
    execvp(argv[0], argv);
    die(argv[0]);
}

/* Removes a private directory's backing (an overlay's work directory holds a fixed tree). */
static void remove_private(int dir, const char *name, struct private_dir *p) {
    char path[4200];
    if (p->overlay) {
        static const char *work[] = {"work/incompat/volatile/dirty", "work/incompat/volatile",
                                     "work/incompat", "work"};
        for (unsigned i = 0; i < 4; i++) {
            snprintf(path, sizeof path, "%s.work/%s", name, work[i]);
            if (unlinkat(dir, path, i ? AT_REMOVEDIR : 0)) die("remove the overlay work tree");
        }
        snprintf(path, sizeof path, "%s.work", name);
        if (unlinkat(dir, path, AT_REMOVEDIR)) die("remove the overlay work directory");
    }
    if (unlinkat(dir, name, AT_REMOVEDIR)) die("remove the private directory");
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
    char ns[4096];
    if (!realpath(argv[1], ns)) die("resolve the namespace");
    struct private_dir dirs[2];
    plan_private(&dirs[0], "/tmp", dir, root, "private-tmp");
    plan_private(&dirs[1], "/var/tmp", dir, root, "private-var-tmp");
    discover();

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
    if (pid == 0) child(argv + 2, rules, ns, dirs);
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
    remove_private(dir, "private-tmp", &dirs[0]);
    remove_private(dir, "private-var-tmp", &dirs[1]);
    if (unlinkat(dir, "home", AT_REMOVEDIR) || unlinkat(dir, "tmp", AT_REMOVEDIR) ||
        unlinkat(dir, "xdg/runtime", AT_REMOVEDIR) || unlinkat(dir, "xdg", AT_REMOVEDIR) ||
        unlinkat(dir, "cleanroom-root.json", 0) || rmdir(root))
        die("remove the root");
    close(dir);
    while (waitpid(watchdog, NULL, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
