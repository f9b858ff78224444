#!/usr/bin/env python3
"""Check Kubernetes manifests against the Pod Security Standards' "restricted"
profile (which includes "baseline"), as the Pod Security admission controller
would at `pod-security.kubernetes.io/enforce: restricted`, plus the rules this
project adds for a daemon's manifest.

Usage: pod_security.py MANIFEST.yaml...   (exit 0: every pod template passes;
1: each violation printed as `file: kind/name: container: rule`).

The checks follow the documented controls of the standard, field by field:
baseline (host namespaces, privileged, capabilities, hostPath, host ports,
AppArmor, SELinux, /proc mount, seccomp, sysctls) and restricted (volume
types, privilege escalation, running as non-root, non-root uid, seccomp,
capabilities). The project's own rules: a read-only root file system,
requests and limits for CPU and memory, every exec probe's timeoutSeconds
longer than the `--timeout` it passes to steadfastctl, and
STEADFAST_SERVICE_MANAGER=container set on every container.
"""
import sys

import yaml

POD_KINDS = {"Pod"}
TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job",
                  "ReplicationController"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}
BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                 "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP",
                 "SETUID", "SYS_CHROOT"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {None, "", "container_t", "container_init_t", "container_kvm_t",
                 "container_engine_t"}


def pod_specs(doc):
    kind = doc.get("kind")
    name = doc.get("metadata", {}).get("name", "?")
    if kind in POD_KINDS:
        yield f"{kind}/{name}", doc.get("spec", {})
    elif kind in TEMPLATE_KINDS:
        yield f"{kind}/{name}", doc.get("spec", {}).get("template", {}).get("spec", {})
    elif kind == "CronJob":
        job = doc.get("spec", {}).get("jobTemplate", {}).get("spec", {})
        yield f"{kind}/{name}", job.get("template", {}).get("spec", {})


def check_pod(spec):
    """Yield (container or "pod", rule) for each violation."""
    psc = spec.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            yield "pod", f"baseline: {field} must be unset or false"
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        yield "pod", "baseline: hostProcess must be false"
    for volume in spec.get("volumes") or []:
        types = set(volume) - {"name"}
        if "hostPath" in types:
            yield "pod", f"baseline: volume {volume.get('name')} is a hostPath"
        if not types <= RESTRICTED_VOLUMES:
            yield "pod", f"restricted: volume {volume.get('name')} has type {sorted(types)}"
    for sysctl in psc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            yield "pod", f"baseline: sysctl {sysctl.get('name')} is not in the safe set"
    if (psc.get("seLinuxOptions") or {}).get("type") not in SELINUX_TYPES:
        yield "pod", "baseline: seLinuxOptions.type is not allowed"
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp == "Unconfined":
        yield "pod", "baseline: seccompProfile must not be Unconfined"
    if (psc.get("appArmorProfile") or {}).get("type") == "Unconfined":
        yield "pod", "baseline: appArmorProfile must not be Unconfined"
    if psc.get("runAsUser") == 0:
        yield "pod", "restricted: runAsUser must not be 0"
    containers = [("container", c) for c in spec.get("containers") or []]
    containers += [("initContainer", c) for c in spec.get("initContainers") or []]
    containers += [("ephemeralContainer", c) for c in spec.get("ephemeralContainers") or []]
    for role, c in containers:
        name = f"{role} {c.get('name', '?')}"
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            yield name, "baseline: privileged must be false"
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            yield name, "baseline: hostProcess must be false"
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                yield name, "baseline: hostPort must be unset or 0"
        if sc.get("procMount") not in (None, "Default"):
            yield name, "baseline: procMount must be Default"
        if (sc.get("seLinuxOptions") or {}).get("type") not in SELINUX_TYPES:
            yield name, "baseline: seLinuxOptions.type is not allowed"
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            yield name, "baseline: appArmorProfile must not be Unconfined"
        caps = sc.get("capabilities") or {}
        added = set(caps.get("add") or [])
        if not added <= BASELINE_CAPS:
            yield name, f"baseline: capabilities added beyond the baseline set: {sorted(added - BASELINE_CAPS)}"
        if not added <= {"NET_BIND_SERVICE"}:
            yield name, "restricted: only NET_BIND_SERVICE may be added"
        if "ALL" not in (caps.get("drop") or []):
            yield name, "restricted: capabilities.drop must include ALL"
        if sc.get("allowPrivilegeEscalation") is not False:
            yield name, "restricted: allowPrivilegeEscalation must be false"
        if not (sc.get("runAsNonRoot") is True
                or (psc.get("runAsNonRoot") is True and sc.get("runAsNonRoot") is not False)):
            yield name, "restricted: runAsNonRoot must be true"
        if sc.get("runAsUser") == 0:
            yield name, "restricted: runAsUser must not be 0"
        seccomp = (sc.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in ("RuntimeDefault", "Localhost"):
            yield name, "restricted: seccompProfile.type must be RuntimeDefault or Localhost"
        if role != "container":
            continue
        # This project's rules for a daemon's manifest.
        if sc.get("readOnlyRootFilesystem") is not True:
            yield name, "project: readOnlyRootFilesystem must be true"
        resources = c.get("resources") or {}
        for kind in ("requests", "limits"):
            for what in ("cpu", "memory"):
                if what not in (resources.get(kind) or {}):
                    yield name, f"project: resources.{kind}.{what} must be set"
        env = {e.get("name"): e.get("value") for e in c.get("env") or []}
        if env.get("STEADFAST_SERVICE_MANAGER") != "container":
            yield name, "project: STEADFAST_SERVICE_MANAGER must be container"
        for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = c.get(probe_name)
            if not probe:
                continue
            command = (probe.get("exec") or {}).get("command") or []
            if "--timeout" in command:
                timeout = float(command[command.index("--timeout") + 1])
                if probe.get("timeoutSeconds", 1) <= timeout:
                    yield name, (f"project: {probe_name}.timeoutSeconds "
                                 f"({probe.get('timeoutSeconds', 1)}) must exceed its --timeout ({timeout:g})")


def main(paths):
    bad = 0
    pods = 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                if not doc:
                    continue
                for where, spec in pod_specs(doc):
                    pods += 1
                    for who, rule in check_pod(spec):
                        print(f"{path}: {where}: {who}: {rule}")
                        bad += 1
    if pods == 0:
        print("no pod template found", file=sys.stderr)
        return 1
    print(f"{pods} pod template(s) checked, {bad} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
