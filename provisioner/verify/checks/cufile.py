"""cuFile checks (``cufile.*``, ``libcufile.*``, ``packages.*``): cufile.json, compat mode,
libcufile and the GDS packages."""

from __future__ import annotations

from provisioner.verify.checks.registry import Context, check
from provisioner.verify.model import FAIL, PASS, SKIP, WARN, CheckResult


@check("cufile.json.valid", "cufile.json present, parsable, known keys of the right types")
def json_valid(ctx: Context) -> CheckResult:
    cid = "cufile.json.valid"
    cf = ctx.f.get("cufile") or {}
    path = cf.get("path") or "/etc/cufile.json"
    if not cf.get("present"):
        return CheckResult(cid, FAIL, f"{path} present and valid", "missing",
                           f"{path} does not exist: run the gdsfleet.gds.cufile role.")
    if not cf.get("valid"):
        return CheckResult(cid, FAIL, f"{path} present and valid",
                           str(cf.get("error")), f"Fix {path}: {cf.get('error')}.")
    if cf.get("unknown_keys"):
        sug = cf.get("suggestions") or {}
        items = ", ".join(f"{k}" + (f" (did you mean {sug[k]}?)" if k in sug else "")
                          for k in cf["unknown_keys"])
        return CheckResult(cid, WARN, "only known keys", f"unknown: {items}",
                           "cuFile ignores unknown keys: rename or remove them.")
    if cf.get("type_errors"):
        return CheckResult(cid, WARN, "values of the documented types",
                           "; ".join(cf["type_errors"]),
                           "Fix these values (the gdsfleet.gds.cufile role validates them the "
                           "same way).")
    return CheckResult(cid, PASS, f"{path} present and valid", "valid",
                       "cufile.json parses" + (" (after stripping comments)." if cf.get(
                           "had_comments") else "."))


@check("cufile.compat_mode", "cuFile cannot fall back to POSIX silently")
def compat_mode(ctx: Context) -> CheckResult:
    cid = "cufile.compat_mode"
    cf = ctx.f.get("cufile") or {}
    if not cf.get("valid"):
        return CheckResult(cid, SKIP, "allow_compat_mode false", "no valid file",
                           "Skipped: cufile.json is missing or invalid.")
    if cf.get("force_compat_mode"):
        return CheckResult(cid, FAIL, "force_compat_mode false", "force_compat_mode true",
                           "force_compat_mode sends all I/O through the CPU: set it false.")
    if ctx.p.require_allow_compat_false and cf.get("allow_compat_mode"):
        return CheckResult(cid, FAIL, "allow_compat_mode false", "allow_compat_mode true",
                           "With allow_compat_mode true a broken node silently runs through the "
                           "CPU. Set properties.allow_compat_mode false (gdsfleet.gds.cufile "
                           "role).")
    return CheckResult(cid, PASS,
                       "allow_compat_mode false" if ctx.p.require_allow_compat_false else
                       "force_compat_mode false",
                       f"allow_compat_mode {str(cf.get('allow_compat_mode')).lower()}",
                       "cuFile cannot silently fall back to POSIX." if not cf.get(
                           "allow_compat_mode") else "Compat fallback allowed by policy.")


@check("libcufile.present", "libcufile installed", operator_skip=True)
def libcufile_present(ctx: Context) -> CheckResult:
    cid = "libcufile.present"
    lib = ctx.f.get("libcufile") or {}
    pk = ctx.f.get("packages") or {}
    if lib.get("found") or pk.get("libcufile"):
        where = ", ".join(sorted(pk.get("libcufile") or {})) or ", ".join(lib.get("paths", []))
        return CheckResult(cid, PASS, "libcufile installed", where, "libcufile is installed.")
    if ctx.operator:
        return ctx.operator_skip(cid, "libcufile installed",
                                 "no host CUDA: libcufile comes with the workload's CUDA "
                                 "container image (and with the verification runtime's kvikio "
                                 "for the I/O test).")
    return CheckResult(cid, FAIL, "libcufile installed", "not found",
                       "Install libcufile-X-Y from the CUDA repository (gdsfleet.gds.cuda role).")


@check("packages.gds", "GDS packages from the CUDA repository", operator_skip=True)
def packages_gds(ctx: Context) -> CheckResult:
    cid, expected = "packages.gds", "CUDA repository GDS packages"
    pk = ctx.f.get("packages") or {}
    look = pk.get("distro_lookalikes") or []
    if look:
        return CheckResult(cid, WARN, expected, ", ".join(look),
                           "Packages from the distribution's own archive are installed: remove "
                           "them and use the CUDA repository's -X-Y packages.")
    if pk.get("nvidia_gds") or pk.get("gds_tools"):
        names = sorted({**(pk.get("nvidia_gds") or {}), **(pk.get("gds_tools") or {})}.items())
        return CheckResult(cid, PASS, expected, ", ".join(f"{k}={v}" for k, v in names),
                           "GDS packages are installed.")
    if ctx.operator:
        return ctx.operator_skip(cid, expected,
                                 "the GPU Operator brings nvidia-fs and the workloads bring CUDA "
                                 "and cuFile; no host GDS packages are expected.")
    if pk.get("manager"):
        return CheckResult(cid, WARN, expected, "none found",
                           "No nvidia-gds-X-Y / gds-tools-X-Y package is installed: run the "
                           "gdsfleet.gds.cuda role.")
    return CheckResult(cid, SKIP, expected, "no package manager",
                       "Skipped: neither dpkg-query nor rpm is available.")
