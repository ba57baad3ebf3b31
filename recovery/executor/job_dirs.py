"""Where a job's ranks keep their files on this node (one directory per submission of a job,
JOBS_DIR/JOB/SUBMISSION, outside TRAINMEDIC_HOME) and which Unix user they run as (docs/executor.md,
"Rank directories and the rank user").
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from trainmedic.common.errors import ConfigError
from trainmedic.schemas.jobs import SUBMISSION_NAME

log = logging.getLogger(__name__)

LOGS = "logs"
SNAPSHOTS = "snapshots"
KEPT_SUBMISSIONS = 5  # a job's submissions whose logs a node keeps; only the newest keeps snapshots
MAX_DEPTH = 64  # a tree a rank made deeper than this is not removed (and is logged)
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK  # a directory only, never a link
RANKS_AS_ROOT_REFUSED = (
    "the executor runs as root and neither job_uids nor run_as is set: its ranks would run as root, "
    "able to read every key and credential of this node and to ptrace the executor. Give each job a "
    "uid of its own with --job-uids 61184-65519 (TRAINMEDIC_EXECUTOR_JOB_UIDS), or create one user for "
    "every job's ranks (e.g. `useradd --system trainmedic-rank`) and pass --run-as trainmedic-rank, or "
    "pass --ranks-as-root to run them as root on a machine that is yours alone")
RANKS_AS_ROOT_WARNING = (
    "RANKS RUN AS ROOT (--ranks-as-root): every job can read this node's keys and credentials, and "
    "ptrace the executor")
SHARED_USER_WARNING = (
    "RANKS RUN AS THE EXECUTOR'S OWN USER (%s): a job can read this node's keys and credentials, "
    "and the executor's environment; set run_as (--run-as, TRAINMEDIC_EXECUTOR_RUN_AS) to a user of "
    "their own and run the executor as root (docs/security.md, \"Ranks carry no secrets\")")


@dataclass(frozen=True, slots=True)
class RankUser:
    """The Unix user (and its primary group, no other) every rank of this executor runs as."""

    name: str
    uid: int
    gid: int

    @classmethod
    def named(cls, who: str, euid: int) -> RankUser:
        """`who` (a user name or uid) as a rank user of an executor running as `euid`; a ConfigError
        when there is no such user, it is root, or the executor cannot switch to it."""
        try:
            entry = pwd.getpwuid(int(who)) if who.isdigit() else pwd.getpwnam(who)
        except KeyError:
            raise ConfigError(f"run_as: no user {who!r} on this node (create one for the ranks, e.g. "
                              "`useradd --system trainmedic-rank`)") from None
        if entry.pw_uid == 0:
            raise ConfigError("run_as: ranks running as root could read everything of this node's "
                              "control plane; name an unprivileged user")
        if euid != 0:
            raise ConfigError(f"run_as: switching ranks to {entry.pw_name} needs an executor running as "
                              f"root, and this one runs as uid {euid}")
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid)


def default_root(home: Path) -> Path:
    """Where the jobs' directories of every node of this machine are, next to `home`, not in it."""
    return home.with_name(f"{home.name}-jobs")


def checkpoints(checkpoint_dir: str | None, job: str, submission: str) -> str | None:
    """Where one submission's ranks write their checkpoints: the job spec's `checkpoint_dir`/JOB/
    SUBMISSION (relative like it: the rank's workdir's), so that no submission ever reads another's
    unless it asks to resume one; None without a checkpoint_dir."""
    return None if checkpoint_dir is None else os.path.join(checkpoint_dir, job, submission)


def prepare(job_dir: Path, user: RankUser | None) -> Path:
    """Make `job_dir` (JOBS_DIR/JOB/SUBMISSION: 0700, with its logs and snapshots directories) the
    ranks' own: `user`'s when given; JOBS_DIR and JOBS_DIR/JOB the executor's, 0711. Returns the logs
    directory. What lies inside a submission's directory is the rank's to change, so the executor
    (root, with run_as) never follows a link there: a `logs` made a link to /etc must not hand /etc
    over."""
    jobs = job_dir.parent.parent
    jobs.mkdir(parents=True, exist_ok=True)
    os.chmod(jobs, 0o711)
    parent = os.open(jobs, os.O_RDONLY | os.O_DIRECTORY)
    try:
        job = _own_dir(parent, job_dir.parent.name, None, 0o711)
        try:
            submission = _own_dir(job, job_dir.name, user)
            try:
                for name in (LOGS, SNAPSHOTS):
                    os.close(_own_dir(submission, name, user))
            finally:
                os.close(submission)
        finally:
            os.close(job)
    finally:
        os.close(parent)
    return job_dir / LOGS


def prepare_checkpoints(where: str, roots: tuple[str, ...], user: RankUser) -> None:
    """Make one submission's checkpoint directory (`where`: CHECKPOINT_DIR/JOB/SUBMISSION, absolute)
    `user`'s, 0700: ranks of a uid of their own cannot make it in a folder an admin made. Only
    below one of `roots` (the admission policy's `allowed_dirs`; none: nothing is made, the ranks
    make it themselves), walking down from that root without following a link, and only what is
    missing: a directory that is there is never given away nor changed (the job names the path).
    The directories above the submission's are made the executor's, 0755 (`resume: latest` lists
    the job's). Where it cannot (a file system that squashes root), it says so."""
    target = os.path.normpath(where)
    root = next((os.path.normpath(r) for r in roots
                 if target.startswith(os.path.normpath(r).rstrip(os.sep) + os.sep)), None)
    if root is None:
        return
    parts = os.path.relpath(target, root).split(os.sep)
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for depth, name in enumerate(parts):
                last = depth == len(parts) - 1
                try:
                    os.mkdir(name, 0o700 if last else 0o755, dir_fd=fd)
                    made = True
                except FileExistsError:
                    made = False
                child = os.open(name, _DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = child
                if made:
                    if last:
                        os.fchown(fd, user.uid, user.gid)
                    os.fchmod(fd, 0o700 if last else 0o755)
        finally:
            os.close(fd)
    except OSError as err:
        log.warning("could not make %s uid %d's (%s): its ranks make it themselves", where, user.uid, err)


def prune(job_dir: Path) -> None:
    """In the directory of `job_dir`'s job: the snapshots of every submission older than `job_dir`'s
    (their names sort by submission time; no restore reads another submission's), and the whole
    directories of all but the newest `KEPT_SUBMISSIONS`. A newer one (another deployment's, on a
    shared jobs dir) is left alone, and so is anything not named as a submission. What it removes
    belongs to the ranks, which may be replacing it meanwhile: nothing is followed or opened but a
    directory, opened without following a link (`_remove`)."""
    job = os.open(job_dir.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        older = sorted((name for name in os.listdir(job)
                        if SUBMISSION_NAME.fullmatch(name) and name < job_dir.name), reverse=True)
        for number, name in enumerate(older, start=2):  # the current submission is the first kept
            if number > KEPT_SUBMISSIONS:
                _remove(job, name)
            else:
                _remove_in(job, name, SNAPSHOTS)
    finally:
        os.close(job)


def _remove_in(parent: int, directory: str, name: str) -> None:
    """`name` in the directory `directory` of `parent` (`_remove`), if that is a directory."""
    try:
        where = os.open(directory, _DIRECTORY, dir_fd=parent)
    except OSError:
        return
    try:
        _remove(where, name)
    finally:
        os.close(where)


def _remove(parent: int, name: str, depth: int = 0) -> None:
    """`name` in `parent`, a file or a whole tree. A directory is opened only as one, never through
    a link (`O_DIRECTORY | O_NOFOLLOW`: a link, a FIFO or a device is unlinked, never opened); an
    entry that cannot go is logged and the rest goes on."""
    try:
        fd = os.open(name, _DIRECTORY, dir_fd=parent)
    except FileNotFoundError:
        return
    except OSError as err:
        if err.errno not in (errno.ENOTDIR, errno.ELOOP):
            log.warning("not removed: %s (%s)", name, err)
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=parent)
        return
    try:
        if depth >= MAX_DEPTH:
            log.warning("not removed: %s is more than %d directories deep", name, MAX_DEPTH)
            return
        for entry in os.listdir(fd):
            _remove(fd, entry, depth + 1)
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=parent)
    except OSError as err:  # not empty: a rank wrote into it meanwhile, or what was too deep is left
        log.warning("not removed: %s (%s)", name, err)


def _own_dir(parent: int, name: str, user: RankUser | None, mode: int = 0o700) -> int:
    """Directory `name` in `parent` (made when missing), `mode` and `user`'s (None: the executor's),
    never through a link (an OSError, ELOOP, then); its descriptor."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, mode, dir_fd=parent)
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    if user is not None:  # the owner first: the one before could change the mode in between
        os.fchown(fd, user.uid, user.gid)
    elif os.fstat(fd).st_uid != os.geteuid():  # an earlier layout made it a rank's: the executor's now
        os.fchown(fd, os.geteuid(), os.getegid())
    os.fchmod(fd, mode)  # an existing one too, and whatever the umask
    return fd


def put(job_dir: Path, subdir: str, name: str, text: str) -> Path:
    """`text` as `job_dir/subdir/name`, readable by the rank (0644), whole or not at all, never
    through a link: the rank may have made `subdir`, or a file in it, a link elsewhere."""
    job = os.open(job_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(subdir, 0o755, dir_fd=job)
        sub = os.open(subdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=job)
        try:
            part = f".{name}.part"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(part, dir_fd=sub)
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=sub)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(part, name, src_dir_fd=sub, dst_dir_fd=sub)
        finally:
            os.close(sub)
    finally:
        os.close(job)
    return job_dir / subdir / name


def open_log(path: Path, user: RankUser | None = None) -> int:
    """`path` (in a job's logs directory) opened to append and read, made `user`'s when given (a rank
    forked warm opens it by name as that user), never through a link in its last two parts, nor a
    FIFO or a device: what the rank may have replaced. An OSError if either is a link or not a file
    of its own. The executor reads a failed rank's last output from this descriptor, never by name."""
    logs = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fd = os.open(path.name, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600,
                     dir_fd=logs)
    finally:
        os.close(logs)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:  # a FIFO, or a hard link to a file elsewhere
        os.close(fd)
        raise OSError(f"{path} is not a log file of its own: not written")
    if user is not None:
        os.fchown(fd, user.uid, user.gid)
    return fd
