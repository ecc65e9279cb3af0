# TEST STAND-IN (gdsfleet test harness): builds the stand-in .deb packages with the real NVIDIA /
# Mellanox package names and versions (see docs/testing.md). None of them contains NVIDIA
# software: tools are small scripts that print realistic output computed from the simulated node
# (tests/harness/node/), DKMS "modules" are text files the simulated modprobe understands.
# Called by build.sh:  python3 build_debs.py OUTDIR KERNEL CUDA_KEYRING_GPG REPO_URL
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAYLOAD = HERE / "payload"
MAINT = "gdsfleet test harness <stand-in@gdsfleet.invalid>"
STANDIN = "TEST STAND-IN (gdsfleet test harness), not NVIDIA software"


@dataclass
class Pkg:
    name: str
    version: str
    description: str
    arch: str = "amd64"
    depends: str = ""
    files: dict[str, tuple[str, int]] = field(default_factory=dict)  # path -> (text, mode)
    symlinks: dict[str, str] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)
    postinst: str = ""
    prerm: str = ""
    postrm: str = ""
    conffiles: list[str] = field(default_factory=list)
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version}_{self.arch}.deb"


def payload(name: str, **subst: str) -> str:
    text = (PAYLOAD / name).read_text()
    for k, v in subst.items():
        text = text.replace(f"@{k}@", v)
    return text


def script(body: str) -> str:
    return f"#!/bin/sh\n# {STANDIN}: maintainer script.\nset -e\n{body.strip()}\n"


def build_deb(pkg: Pkg, outdir: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        (root / "DEBIAN").mkdir(parents=True)
        doc = f"usr/share/doc/{pkg.name}/README.stand-in"
        files = dict(pkg.files)
        files.setdefault(doc, (f"{pkg.name} {pkg.version}: {STANDIN}.\n{pkg.description}\n",
                               0o644))
        for d in pkg.dirs:
            (root / d).mkdir(parents=True, exist_ok=True)
        for path, (text, mode) in files.items():
            p = root / path
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            p.chmod(mode)
        for path, target in pkg.symlinks.items():
            p = root / path
            p.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, p)
        size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) // 1024 + 1
        control = [f"Package: {pkg.name}", f"Version: {pkg.version}",
                   f"Architecture: {pkg.arch}", f"Maintainer: {MAINT}",
                   f"Installed-Size: {size}", "Section: multiverse/devel", "Priority: optional"]
        if pkg.depends:
            control.append(f"Depends: {pkg.depends}")
        for k, v in pkg.extra.items():
            control.append(f"{k}: {v}")
        control.append(f"Description: {pkg.description}\n {STANDIN}.")
        (root / "DEBIAN/control").write_text("\n".join(control) + "\n")
        for name in ("postinst", "prerm", "postrm"):
            body = getattr(pkg, name)
            if body:
                p = root / "DEBIAN" / name
                p.write_text(script(body))
                p.chmod(0o755)
        if pkg.conffiles:
            (root / "DEBIAN/conffiles").write_text("".join(f"/{c}\n" for c in pkg.conffiles))
        outdir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build",
                        str(root), str(outdir / pkg.filename)], check=True,
                       stdout=subprocess.DEVNULL)


# ---------------------------------------------------------------------------------- CUDA repo
CUDA_SERIES = [
    # (cuda X-Y, toolkit version, GDS/libcufile version, libcufile soname version,
    #  libcufile API version printed by gdscheck, minimum nvidia-fs)
    ("12-8", "12.8.1-1", "1.13.1.3-1", "1.13.1", "2.12", "2.24.3"),
    ("12-9", "12.9.1-1", "1.14.1.1-1", "1.14.1", "2.12", "2.25.7"),
    ("13-0", "13.0.2-1", "1.15.1.6-1", "1.15.1", "2.13", "2.26.6"),
    ("13-1", "13.1.0-1", "1.16.0.49-1", "1.16.0", "2.14", "2.26.6"),
]
# 2.28.4: the first releases that build on 6.17+ (the lab runs the host's kernel) are 2.28.x
NVFS_VERSIONS = ["2.25.7", "2.26.6", "2.28.4"]


def dkms_postinst(module: str, version: str, after: str = "") -> str:
    return f"""
M={module}
V={version}
if [ "$1" = configure ]; then
    dkms add -m "$M" -v "$V" >/dev/null 2>&1 || true
    k=$(uname -r)
    if [ -e "/lib/modules/$k/build" ]; then
        dkms build -m "$M" -v "$V" -k "$k" || {{
            rc=$?; echo "Error! Build of $M failed for: $k ($(uname -m))" >&2; exit $rc; }}
        dkms install -m "$M" -v "$V" -k "$k"
    else
        echo "Module build for kernel $k was skipped since the kernel headers for this" \
             "kernel do not seem to be installed."
    fi
    {after}
fi
"""


def dkms_prerm(module: str, version: str) -> str:
    return f"""
case "$1" in
    remove|upgrade|deconfigure|failed-upgrade)
        dkms remove -m {module} -v {version} --all >/dev/null 2>&1 || true ;;
esac
"""


def dkms_conf(module: str, version: str, built: list[str], extra: str = "") -> str:
    lines = [f"# {STANDIN}", f'PACKAGE_NAME="{module}"', f'PACKAGE_VERSION="{version}"',
             'MAKE[0]="make -j$(nproc) KVER=${kernelver}"', 'CLEAN="make clean"']
    for i, b in enumerate(built):
        lines += [f'BUILT_MODULE_NAME[{i}]="{b}"', f'DEST_MODULE_LOCATION[{i}]="/kernel/drivers"']
    lines += ['AUTOINSTALL="yes"', 'REMAKE_INITRD="yes"']
    return "\n".join(lines) + "\n" + extra


def cuda_packages(kernel: str, keyring: bytes, repo_url: str) -> list[Pkg]:
    pkgs: list[Pkg] = []
    for series, tk_ver, gds_ver, soname, api, nvfs_min in CUDA_SERIES:
        dot = series.replace("-", ".")
        base = f"usr/local/cuda-{dot}"
        prio = str(int(series.replace("-", "")) * 10)
        major = dot.split(".")[0]
        gds = gds_ver.split("-")[0]
        pkgs.append(Pkg(
            f"cuda-toolkit-{series}", tk_ver, f"CUDA Toolkit {dot} meta-package",
            files={f"{base}/version.json": (
                       f'{{\n   "cuda" : {{\n      "name" : "CUDA SDK",\n      "version" : '
                       f'"{tk_ver.split("-")[0]}"\n   }}\n}}\n', 0o644),
                   f"{base}/bin/nvcc": (
                       f"#!/bin/sh\n# {STANDIN}\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                       f"echo 'Cuda compilation tools, release {dot}, V{tk_ver.split('-')[0]}'\n",
                       0o755)},
            dirs=[f"{base}/targets/x86_64-linux/lib"],
            postinst=f"""
if [ "$1" = configure ]; then
    update-alternatives --install /usr/local/cuda cuda /{base} {prio}
    update-alternatives --install /usr/local/cuda-{major} cuda-{major} /{base} {prio}
fi
""",
            prerm=f"""
if [ "$1" = remove ]; then
    update-alternatives --remove cuda /{base} || true
    update-alternatives --remove cuda-{major} /{base} || true
fi
"""))
        cufile = payload("cufile.json")
        pkgs.append(Pkg(
            f"libcufile-{series}", gds_ver, f"cuFile (GPUDirect Storage) library, CUDA {dot}",
            files={f"{base}/targets/x86_64-linux/lib/libcufile.so.{soname}": (
                       f"{STANDIN}: libcufile {gds}\n", 0o644),
                   f"{base}/gds/cufile.json": (cufile, 0o644)},
            symlinks={f"{base}/targets/x86_64-linux/lib/libcufile.so.0": f"libcufile.so.{soname}"},
            # several libcufile-X-Y may be installed together: /etc/cufile.json is seeded from
            # the first one and then belongs to the administrator (never overwritten)
            postinst=f"""
if [ "$1" = configure ] && [ ! -e /etc/cufile.json ]; then
    cp /{base}/gds/cufile.json /etc/cufile.json
    chmod 0644 /etc/cufile.json
fi
"""))
        pkgs.append(Pkg(
            f"libcufile-dev-{series}", gds_ver, f"cuFile development files, CUDA {dot}",
            depends=f"libcufile-{series} (>= {gds})",
            files={f"{base}/targets/x86_64-linux/include/cufile.h": (
                f"/* {STANDIN} */\n#pragma once\n", 0o644)},
            symlinks={f"{base}/targets/x86_64-linux/lib/libcufile.so": "libcufile.so.0"}))
        tools = f"{base}/gds/tools"
        pkgs.append(Pkg(
            f"gds-tools-{series}", gds_ver,
            f"GPUDirect Storage tools (gdscheck, gdsio), CUDA {dot}",
            depends=f"libcufile-{series} (>= {gds})",
            files={f"{tools}/gdscheck": (payload("gdscheck", GDS_VERSION=gds, CUDA_VERSION=dot,
                                                 LIBCUFILE_API=api), 0o755),
                   f"{tools}/gdscheck.py": (payload("gdscheck.py"), 0o755),
                   f"{tools}/gdsio": (payload("gdsio"), 0o755),
                   f"{tools}/gdsio_verify": (payload("gdsio"), 0o755),
                   f"{tools}/gds_stats": (payload("gds_stats"), 0o755)}))
        pkgs.append(Pkg(
            f"nvidia-gds-{series}", tk_ver, f"GPUDirect Storage meta-package, CUDA {dot}",
            depends=(f"gds-tools-{series} (>= {gds}), libcufile-{series} (>= {gds}), "
                     f"libcufile-dev-{series} (>= {gds}), nvidia-fs (>= {nvfs_min}), "
                     f"nvidia-fs-dkms (>= {nvfs_min})")))
    for v in NVFS_VERSIONS:
        src = f"usr/src/nvidia-fs-{v}"
        pkgs.append(Pkg(
            "nvidia-fs-dkms", f"{v}-1", "NVIDIA GPUDirect Storage kernel module (DKMS source)",
            depends="dkms",
            files={f"{src}/dkms.conf": (dkms_conf("nvidia-fs", v, ["nvidia-fs"],
                                                  'BUILD_DEPENDS[0]="nvidia"\n'), 0o644),
                   f"{src}/GDS_VERSION": (v + "\n", 0o644),
                   f"{src}/nvfs-core.c": (f"/* {STANDIN} */\n", 0o644)},
            postinst=dkms_postinst("nvidia-fs", v), prerm=dkms_prerm("nvidia-fs", v)))
        pkgs.append(Pkg("nvidia-fs", f"{v}-1", "NVIDIA GPUDirect Storage kernel module",
                        depends=f"nvidia-fs-dkms (= {v}-1)"))
    pkgs.append(Pkg(
        "dkms", "3.0.10-8+deb12u1", "Dynamic Kernel Module System (stand-in)", arch="all",
        extra={"Recommends": "linux-headers-amd64 | linux-headers-generic | linux-headers"},
        files={"usr/sbin/dkms": (payload("dkms"), 0o755),
               # like the real package: build every AUTOINSTALL module for a new kernel
               "etc/kernel/postinst.d/dkms": (
                   f"#!/bin/sh\n# {STANDIN}: dkms's kernel hook\n"
                   '[ -n "${1:-}" ] || exit 0\n'
                   '[ -e "/lib/modules/$1/build" ] || { echo "dkms: no headers for $1," '
                   '"skipping" >&2; exit 0; }\n'
                   'dkms autoinstall -k "$1" || true\n', 0o755)},
        dirs=["var/lib/dkms"]))
    kver = kernel.split("-")[0]
    if not kver[:1].isdigit():
        kver = "0"
    pkgs.append(Pkg(
        f"linux-headers-{kernel}", f"{kver}-1", f"Header files for Linux {kernel} (stand-in)",
        files={f"usr/src/linux-headers-{kernel}/Makefile": (f"# {STANDIN}\n", 0o644)},
        symlinks={f"lib/modules/{kernel}/build": f"/usr/src/linux-headers-{kernel}"}))
    pkgs.append(Pkg(
        "linux-headers-amd64", f"{kver}-1",
        "Header files for Linux amd64 configuration (meta-package; stand-in: the running kernel)",
        depends=f"linux-headers-{kernel} (= {kver}-1)"))
    pkgs += next_kernel_packages(kernel)
    keyring_pkg = Pkg(
        "cuda-keyring", "1.1-1", "GPG keyring for the CUDA repository", arch="all",
        files={"etc/apt/sources.list.d/cuda-debian12-x86_64.list": (
            f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {repo_url} /\n",
            0o644)},
        conffiles=["etc/apt/sources.list.d/cuda-debian12-x86_64.list"])
    pkgs.append(keyring_pkg)
    return pkgs


def next_kernel(kernel: str) -> str:
    """A kernel release newer than ``kernel`` (6.18.44-fc-v595 -> 6.18.45-fc-v595): the kernel an
    update installed and the node boots next (GRUB's default entry is the newest kernel)."""
    m = re.match(r"^(\d+)\.(\d+)\.(\d+)(.*)$", kernel)
    if m:
        return f"{m.group(1)}.{m.group(2)}.{int(m.group(3)) + 1}{m.group(4)}"
    m = re.match(r"^(\d+)\.(\d+)(.*)$", kernel)
    if m:
        return f"{m.group(1)}.{int(m.group(2)) + 1}{m.group(3)}"
    return kernel + "-next"


def next_kernel_packages(kernel: str) -> list[Pkg]:
    """A second, newer kernel (image + headers) that a kernel update would install: the node
    keeps running ``kernel`` (the simulation cannot boot another one) but /boot and /lib/modules
    show the new one, so per-kernel DKMS builds and the boot-kernel check can be tested. Its
    postinst runs /etc/kernel/postinst.d like the real package: the stand-in dkms's hook there
    builds the modules DKMS already has (none before the roles installed them; a kernel
    without headers is skipped), then the kernel gate's hook when the nvidia_fs role installed
    it."""
    nk = next_kernel(kernel)
    nver = nk.split("-")[0] if nk[:1].isdigit() else "0"
    return [
        Pkg(f"linux-image-{nk}", f"{nver}-1", f"Linux kernel image {nk} (stand-in, never booted)",
            files={f"boot/vmlinuz-{nk}": (f"{STANDIN}: kernel image {nk}\n", 0o644),
                   f"boot/config-{nk}": (f"# {STANDIN}\nCONFIG_PCI_P2PDMA=y\n", 0o644),
                   f"lib/modules/{nk}/modules.order": ("", 0o644)},
            postinst=f"""
if [ "$1" = configure ] && [ -d /etc/kernel/postinst.d ]; then
    run-parts --report --exit-on-error --arg={nk} --arg=/boot/vmlinuz-{nk} /etc/kernel/postinst.d
fi
"""),
        Pkg(f"linux-headers-{nk}", f"{nver}-1", f"Header files for Linux {nk} (stand-in)",
            files={f"usr/src/linux-headers-{nk}/Makefile": (f"# {STANDIN}\n", 0o644)},
            symlinks={f"lib/modules/{nk}/build": f"/usr/src/linux-headers-{nk}"}),
    ]


def build_cuda_keyring(pkg: Pkg, keyring: bytes, outdir: Path) -> None:
    """cuda-keyring carries a binary keyring: write it via a staging copy."""
    with tempfile.TemporaryDirectory() as tmp:
        kr = Path(tmp) / "cuda-archive-keyring.gpg"
        kr.write_bytes(keyring)
        pkg.files["usr/share/keyrings/.placeholder"] = ("", 0o644)
        build_deb(pkg, Path(tmp) / "stage")
        # repack with the binary keyring added
        work = Path(tmp) / "x"
        subprocess.run(["dpkg-deb", "-R", str(Path(tmp) / "stage" / pkg.filename), str(work)],
                       check=True)
        (work / "usr/share/keyrings/.placeholder").unlink()
        shutil.copy(kr, work / "usr/share/keyrings/cuda-archive-keyring.gpg")
        (work / "usr/share/keyrings/cuda-archive-keyring.gpg").chmod(0o644)
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", str(work),
                        str(outdir / pkg.filename)], check=True, stdout=subprocess.DEVNULL)


# ---------------------------------------------------------------------------------- DOCA / MOFED
def ofed_packages(short: str, number: str, long: str, ver: str, flavour: str) -> list[Pkg]:
    ofed = payload("ofed_info", SHORT=short, NUMBER=number, LONG=long, FLAVOUR=flavour)
    refresh = "[ -x /usr/local/sbin/gdsfleet-sim ] && /usr/local/sbin/gdsfleet-sim refresh || true"
    pkgs = [
        Pkg("mlnx-ofed-kernel-utils", ver, f"Userspace tools of the {flavour} kernel stack",
            files={"usr/bin/ofed_info": (ofed, 0o755)}),
        Pkg("mlnx-ofed-kernel-dkms", ver, f"{flavour} kernel modules (DKMS source)",
            depends="dkms",
            files={f"usr/src/mlnx-ofed-kernel-{ver.rsplit('-', 1)[0]}/dkms.conf": (
                dkms_conf("mlnx-ofed-kernel", ver.rsplit("-", 1)[0],
                          ["mlx_compat", "ib_core", "mlx5_core", "mlx5_ib"]), 0o644)},
            postinst=dkms_postinst("mlnx-ofed-kernel", ver.rsplit("-", 1)[0]),
            prerm=dkms_prerm("mlnx-ofed-kernel", ver.rsplit("-", 1)[0])),
        Pkg("mlnx-nvme-dkms", ver, f"GDS-patched NVMe driver from {flavour} (DKMS source)",
            depends="dkms",
            files={f"usr/src/mlnx-nvme-{ver.rsplit('-', 1)[0]}/dkms.conf": (
                dkms_conf("mlnx-nvme", ver.rsplit("-", 1)[0],
                          ["nvme", "nvme-core", "nvme-rdma", "nvme-fabrics"]), 0o644)},
            postinst=dkms_postinst("mlnx-nvme", ver.rsplit("-", 1)[0], after=refresh),
            prerm=dkms_prerm("mlnx-nvme", ver.rsplit("-", 1)[0]),
            postrm=refresh),
        Pkg("mlnx-nfsrdma-dkms", ver, f"NFS over RDMA driver from {flavour} (DKMS source)",
            depends="dkms",
            files={f"usr/src/mlnx-nfsrdma-{ver.rsplit('-', 1)[0]}/dkms.conf": (
                dkms_conf("mlnx-nfsrdma", ver.rsplit("-", 1)[0], ["rpcrdma"]), 0o644)},
            postinst=dkms_postinst("mlnx-nfsrdma", ver.rsplit("-", 1)[0]),
            prerm=dkms_prerm("mlnx-nfsrdma", ver.rsplit("-", 1)[0])),
    ]
    return pkgs


def doca_packages() -> list[Pkg]:
    # DOCA 3.1.0 carries MLNX_OFED_SRC-25.07-0.9.7.0 (doca/3.1.0/SOURCES/mlnx_ofed/)
    ver = "25.07.OFED.25.07.0.9.7.1-1"
    pkgs = ofed_packages("OFED-internal-25.07-0.9.7", "25.07-0.9.7", "OFED-25.07-0.9.7", ver,
                         "DOCA-OFED 3.1.0")
    pkgs.append(Pkg("doca-ofed", "3.1.0-1", "DOCA-OFED meta-package",
                    depends=f"mlnx-ofed-kernel-utils (>= {ver}), mlnx-ofed-kernel-dkms (>= {ver})"))
    return pkgs


MOFED = "MLNX_OFED_LINUX-23.10-2.1.3.1-debian12.1-x86_64"


def mofed_tarball(outdir: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp) / MOFED
        (top / "DEBS").mkdir(parents=True)
        for pkg in ofed_packages("MLNX_OFED_LINUX-23.10-2.1.3.1", "23.10-2.1.3.1",
                                 "OFED-23.10-2.1.3", "23.10.OFED.23.10.2.1.3.1-1",
                                 "MLNX_OFED 23.10-2.1.3.1"):
            build_deb(pkg, top / "DEBS")
        (top / "mlnxofedinstall").write_text(payload("mlnxofedinstall"))
        (top / "mlnxofedinstall").chmod(0o755)
        (top / ".mlnx").write_text("23.10-2.1.3.1\n")
        (top / "distro").write_text("debian12.1\n")
        (top / "README.stand-in").write_text(f"{STANDIN}.\n")
        outdir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["tar", "--owner=0", "--group=0", "-C", tmp, "-czf",
                        str(outdir / f"{MOFED}.tgz"), MOFED], check=True)
    # its digest beside it, as NVIDIA's download page lists one: the lab serves the tarball over
    # plain http on loopback, and the mofed role refuses plain http without a checksum
    digest = hashlib.sha256((outdir / f"{MOFED}.tgz").read_bytes()).hexdigest()
    (outdir / f"{MOFED}.tgz.sha256").write_text(f"{digest}  {MOFED}.tgz\n")


def main(argv: list[str]) -> int:
    out, kernel, keyring_path, cuda_url = Path(argv[0]), argv[1], Path(argv[2]), argv[3]
    keyring = keyring_path.read_bytes()
    cuda_dir = out / "cuda/repos/debian12/x86_64"
    doca_dir = out / "doca/3.1.0/debian12/x86_64"
    for pkg in cuda_packages(kernel, keyring, cuda_url):
        if pkg.name == "cuda-keyring":
            build_cuda_keyring(pkg, keyring, cuda_dir)
        else:
            build_deb(pkg, cuda_dir)
    for pkg in doca_packages():
        build_deb(pkg, doca_dir)
    mofed_tarball(out / "mlnx_ofed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
