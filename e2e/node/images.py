#!/usr/bin/env python3
"""Assembles the container images of the one-node cluster without Docker, with umoci.

  images.py build OUT BIN_DIR   OUT/linea.oci.tar  the Dockerfile's runtime image: the
                                                   binaries of BIN_DIR (debuginfo
                                                   stripped), glibc and libgcc of this
                                                   Debian 12 host, CA certificates,
                                                   nonroot uid/gid 65532
                                OUT/pause.oci.tar  the pod sandbox image (pause.c, static)
  images.py expected BIN_DIR    what the Dockerfile's runtime stage holds, one line each
  images.py actual OCI_TAR      the same lines, read back from an assembled image

`expected` reads the Dockerfile (its last stage: COPY, USER, ENTRYPOINT, CMD, LABEL) and
the base it names (gcr.io/distroless/cc-debian12:nonroot: Debian 12's libc6 and
libgcc-s1, the CA bundle, passwd/group with nonroot 65532, /tmp, no shell);
`actual` unpacks the image umoci wrote. e2e/node/image-check.sh compares the two, so the
Dockerfile and this assembler cannot drift apart unnoticed.

The image names match the chart's default (ghcr.io/linea/linea:<appVersion>), so the
chart installs as it is; the kubelet never pulls them (they are on the node).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCKERFILE = os.path.join(ROOT, "Dockerfile")
CHART = os.path.join(ROOT, "charts", "linea", "Chart.yaml")
PAUSE_C = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pause.c")

# What gcr.io/distroless/cc-debian12 is made of, as far as these binaries are concerned:
# the Debian packages of glibc and libgcc (whole, less documentation), the CA bundle, and
# distroless's /etc/passwd, /etc/group, /home/nonroot and /tmp.
BASE_IMAGE = "gcr.io/distroless/cc-debian12:nonroot"
BASE_PACKAGES = ["libc6", "libgcc-s1"]
SKIP_PREFIXES = ("/usr/share/doc", "/usr/share/lintian", "/usr/share/man", "/usr/share/locale")
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
BASE_ENV = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
]
PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
    "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
)
GROUP = "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"
# Debian 12 is usrmerged: dpkg names /lib/..., the files live in /usr/lib/...; the ELF
# interpreter is /lib64/ld-linux-x86-64.so.2, so the image needs these links too.
USRMERGE = {"lib": "usr/lib", "lib64": "usr/lib64"}
PAUSE_IMAGE = "linea.local/pause:1.0"
PAUSE_USER = "65535:65535"


class ImageError(Exception):
    pass


def app_version():
    with open(CHART) as f:
        m = re.search(r'^appVersion:\s*"?([^"\s]+)"?', f.read(), re.M)
    if not m:
        raise ImageError(f"no appVersion in {CHART}")
    return m.group(1)


def linea_image_name():
    return f"ghcr.io/linea/linea:{app_version()}"


def runtime_stage():
    """The Dockerfile's last stage: its base, copied files, user, entrypoint, cmd, labels."""
    with open(DOCKERFILE) as f:
        text = f.read().replace("\\\n", " ")
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")]
    froms = [i for i, l in enumerate(lines) if l.upper().startswith("FROM ")]
    if not froms:
        raise ImageError("Dockerfile has no FROM")
    stage = {"base": lines[froms[-1]].split()[1], "copies": [], "labels": {}}
    for l in lines[froms[-1] + 1:]:
        word, _, rest = l.partition(" ")
        word = word.upper()
        if word == "COPY":
            args = [a for a in rest.split() if not a.startswith("--")]
            src, dest = args[0], args[-1]
            stage["copies"].append((os.path.basename(src), dest))
        elif word == "USER":
            stage["user"] = rest.strip()
        elif word in ("ENTRYPOINT", "CMD"):
            stage[word.lower()] = json.loads(rest)
        elif word == "LABEL":
            for k, v in re.findall(r'(\S+?)="([^"]*)"', rest):
                stage["labels"][k] = v
    if stage["base"] != BASE_IMAGE:
        raise ImageError(f"the Dockerfile's runtime base is {stage['base']}, the assembler knows {BASE_IMAGE}")
    return stage


def package_files(pkg):
    out = subprocess.run(["dpkg", "-L", pkg], check=True, capture_output=True, text=True).stdout
    files = []
    for p in out.splitlines():
        if p in ("/.", "") or p.startswith(SKIP_PREFIXES):
            continue
        if not os.path.isdir(p) and (os.path.isfile(p) or os.path.islink(p)):
            files.append(p)
    return files


def expected_lines(bin_dir):
    """One line per file (path and mode class) plus the config, for the check."""
    stage = runtime_stage()
    files = set()
    for pkg in BASE_PACKAGES:
        files.update(package_files(pkg))
    files.update([CA_BUNDLE, "/etc/passwd", "/etc/group"])
    for src, dest in stage["copies"]:
        if not os.path.isfile(os.path.join(bin_dir, src)):
            raise ImageError(f"{src} not in {bin_dir} (build it: cargo build --release)")
        files.add(dest)
    # usrmerge: dpkg names /lib/..., the image may hold it under usr/lib; compare real paths.
    lines = sorted([f"file {normalise(f)}" for f in files] + [f"file /{link}" for link in USRMERGE])
    lines += ["dir /home/nonroot", "dir /tmp"]
    lines += config_lines(stage["user"], stage["entrypoint"], stage.get("cmd", []), stage["labels"], BASE_ENV)
    return lines


def normalise(path):
    return re.sub(r"^/lib(64)?/", r"/usr/lib\1/", path)


def config_lines(user, entrypoint, cmd, labels, env):
    out = [f"user {user}", f"entrypoint {json.dumps(entrypoint)}", f"cmd {json.dumps(cmd)}"]
    out += [f"label {k}={v}" for k, v in sorted(labels.items())]
    out += [f"env {e}" for e in env]
    return out


def run(*cmd, cwd=None):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise ImageError(f"{' '.join(cmd)} failed: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def place(rootfs, src, dest, strip=False):
    target = os.path.join(rootfs, normalise(dest).lstrip("/"))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.islink(src):
        os.symlink(os.readlink(src), target)
    elif strip:
        # What CARGO_PROFILE_RELEASE_STRIP=debuginfo does in the Dockerfile: the release
        # profile keeps line tables for the tests' backtraces; the image does not need them.
        run("objcopy", "--strip-debug", src, target)
    else:
        shutil.copy2(src, target)


def assemble(oci, tag, fill, user, entrypoint, cmd, labels, env):
    """One image in OCI layout `oci` under `tag`: an empty layer filled by fill(rootfs)."""
    bundle = tempfile.mkdtemp(prefix="linea-image-")
    try:
        if not os.path.exists(os.path.join(oci, "index.json")):
            run("umoci", "init", "--layout", oci)
        run("umoci", "new", "--image", f"{oci}:{tag}")
        shutil.rmtree(bundle)
        run("umoci", "unpack", "--image", f"{oci}:{tag}", bundle)
        fill(os.path.join(bundle, "rootfs"))
        run("umoci", "repack", "--image", f"{oci}:{tag}", bundle)
    finally:
        shutil.rmtree(bundle, ignore_errors=True)
    args = ["umoci", "config", "--image", f"{oci}:{tag}", f"--config.user={user}", "--config.workingdir=/"]
    args += [f"--config.entrypoint={e}" for e in entrypoint]
    args += [f"--config.cmd={c}" for c in cmd]
    args += [f"--config.label={k}={v}" for k, v in sorted(labels.items())]
    args += [f"--config.env={e}" for e in env]
    run(*args)
    run("umoci", "gc", "--layout", oci)


def pack(oci, out_tar):
    with tarfile.open(out_tar, "w") as t:
        for name in sorted(os.listdir(oci)):
            t.add(os.path.join(oci, name), arcname=name)


def build(out, bin_dir):
    os.makedirs(out, exist_ok=True)
    stage = runtime_stage()

    def fill_linea(rootfs):
        for pkg in BASE_PACKAGES:
            for f in package_files(pkg):
                place(rootfs, f, f)
        for link, target in USRMERGE.items():
            os.symlink(target, os.path.join(rootfs, link))
        place(rootfs, CA_BUNDLE, CA_BUNDLE)
        for name, text in (("passwd", PASSWD), ("group", GROUP)):
            with open(os.path.join(rootfs, "etc", name), "w") as f:
                f.write(text)
        for src, dest in stage["copies"]:
            place(rootfs, os.path.join(bin_dir, src), dest, strip=True)
        os.makedirs(os.path.join(rootfs, "home", "nonroot"), exist_ok=True)
        os.chown(os.path.join(rootfs, "home", "nonroot"), 65532, 65532)
        os.makedirs(os.path.join(rootfs, "tmp"), exist_ok=True)
        os.chmod(os.path.join(rootfs, "tmp"), 0o1777)

    name = linea_image_name()
    oci = os.path.join(out, "linea.oci")
    shutil.rmtree(oci, ignore_errors=True)
    assemble(oci, name.rsplit(":", 1)[1], fill_linea, stage["user"], stage["entrypoint"],
             stage.get("cmd", []), stage["labels"], BASE_ENV)
    pack(oci, os.path.join(out, "linea.oci.tar"))

    def fill_pause(rootfs):
        run("gcc", "-Os", "-static", "-s", "-o", os.path.join(rootfs, "pause"), PAUSE_C)

    oci = os.path.join(out, "pause.oci")
    shutil.rmtree(oci, ignore_errors=True)
    assemble(oci, PAUSE_IMAGE.rsplit(":", 1)[1], fill_pause, PAUSE_USER, ["/pause"], [], {}, [])
    pack(oci, os.path.join(out, "pause.oci.tar"))
    print(f"{os.path.join(out, 'linea.oci.tar')} {name}")
    print(f"{os.path.join(out, 'pause.oci.tar')} {PAUSE_IMAGE}")


def actual_lines(oci_tar):
    """The file list and config of an assembled image, read back through umoci."""
    work = tempfile.mkdtemp(prefix="linea-image-check-")
    try:
        with tarfile.open(oci_tar) as t:
            t.extractall(os.path.join(work, "oci"))
        oci = os.path.join(work, "oci")
        tag = run("umoci", "ls", "--layout", oci).split()[0]
        bundle = os.path.join(work, "bundle")
        run("umoci", "unpack", "--image", f"{oci}:{tag}", bundle)
        rootfs = os.path.join(bundle, "rootfs")
        lines = []
        for dirpath, dirnames, filenames in os.walk(rootfs):
            for n in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                lines.append("file /" + os.path.relpath(os.path.join(dirpath, n), rootfs))
        lines.sort()
        for d in ("home/nonroot", "tmp"):
            if os.path.isdir(os.path.join(rootfs, d)):
                lines.append(f"dir /{d}")
        # The image config (not the runtime spec, which flattens entrypoint and cmd).
        with open(os.path.join(oci, "index.json")) as f:
            index = json.load(f)
        manifest = blob(oci, index["manifests"][0]["digest"])
        config = blob(oci, manifest["config"]["digest"])["config"]
        lines += config_lines(config.get("User", ""), config.get("Entrypoint", []), config.get("Cmd", []),
                              config.get("Labels", {}), config.get("Env", []))
        return lines
    finally:
        shutil.rmtree(work, ignore_errors=True)


def blob(oci, digest):
    algo, hexd = digest.split(":", 1)
    with open(os.path.join(oci, "blobs", algo, hexd)) as f:
        return json.load(f)


def main(argv):
    try:
        if len(argv) == 3 and argv[0] == "build":
            build(argv[1], argv[2])
        elif len(argv) == 2 and argv[0] == "expected":
            print("\n".join(expected_lines(argv[1])))
        elif len(argv) == 2 and argv[0] == "actual":
            print("\n".join(actual_lines(argv[1])))
        elif len(argv) == 1 and argv[0] == "name":
            print(linea_image_name())
        elif len(argv) == 1 and argv[0] == "pause-name":
            print(PAUSE_IMAGE)
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (ImageError, OSError, subprocess.CalledProcessError) as e:
        print(f"images.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
