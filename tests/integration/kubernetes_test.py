#!/usr/bin/env python3
"""deploy/kubernetes, parsed and checked against the service it deploys: the StatefulSet's
replicas, pod names and ports against the settings' shard list and ports; the probes against
the admin port's KServe v2 endpoints and the certificates the pod mounts; the grace period
against the drain window; volumes against the settings' paths; the Indexed Job's shard
argument against its completions; the llm-remote overlay against the base. Then the settings
and pipelines of the ConfigMap, their absolute paths mapped into a scratch folder (the demo
models of var/, a keyset, the demo PKI), are loaded by `txscore plan`, and `txscore serve`
runs them as shard txscore-1: the probes' URLs answer 200 on the probe port (which serves
nothing else), and it stops within the grace period. Also: the keyset is wrapped under a KEK
from a Secret of its own, no operator credential is in the Secret the pods mount (made as
kustomization.yaml documents it), and NetworkPolicies open each port to named pods only. Needs scripts/setup.sh's var/ (models)."""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml


def load_all(path):
    with open(path) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


def one(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def mount_of(container, volume):
    return next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == volume)


def under(path, mount):
    return path == mount or path.startswith(mount.rstrip("/") + "/")


def check_manifests(base, overlay):
    kustomization = yaml.safe_load(open(os.path.join(base, "kustomization.yaml")))
    docs = [d for r in kustomization["resources"] for d in load_all(os.path.join(base, r))]
    generated = {g["name"]: g["files"] for g in kustomization["configMapGenerator"]}
    settings = yaml.safe_load(open(os.path.join(base, "txscore.yaml")))
    sts = one(docs, "StatefulSet")
    pod = sts["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert sts["spec"]["selector"]["matchLabels"].items() <= labels.items()
    headless = one(docs, "Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None", "the StatefulSet's Service must be headless for stable names"
    for service in (d for d in docs if d["kind"] == "Service"):
        assert service["spec"]["selector"].items() <= labels.items(), service["metadata"]["name"]
    container = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"thrift": settings["server"]["port"], "admin": settings["admin"]["port"]}, ports
    for service in (d for d in docs if d["kind"] == "Service"):
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, port

    # The shard list is the StatefulSet's pods, by their stable names.
    name = sts["metadata"]["name"]
    shards = settings["sharding"]["shards"]
    assert len(shards) == sts["spec"]["replicas"], (len(shards), sts["spec"]["replicas"])
    for i, shard in enumerate(shards):
        assert shard == {"name": f"{name}-{i}", "address": f"{name}-{i}.{headless['metadata']['name']}:{ports['thrift']}"}, shard
    args = container["args"]
    assert args[0] == "serve" and args[args.index("--shard-name") + 1] == "$(POD_NAME)", args
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    config_path = args[args.index("--config") + 1]
    config_mount = mount_of(container, "config")
    assert os.path.dirname(config_path) == config_mount and os.path.basename(config_path) in generated["txscore-config"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == "txscore-config"

    # Certificates: what the settings and the probes name is mounted from the Secret.
    tls_mount = mount_of(container, "tls")
    tls_items = {os.path.join(tls_mount, item["path"]) for item in volumes["tls"]["secret"]["items"]}
    tls = settings["security"]["tls"]
    for key in ("certificate", "private_key", "client_ca"):
        assert tls[key] in tls_items, (key, tls[key])
    client_dir = settings["sharding"]["client_tls_dir"]
    for f in ("ca.crt", "tls.crt", "tls.key"):
        assert os.path.join(client_dir, f) in tls_items, f"{client_dir}/{f} is not mounted"
    assert under(settings["security"]["keyset"], mount_of(container, "keys"))
    data_mount = mount_of(container, "data")
    assert under(settings["storage"]["path"], data_mount)
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["data"]

    # The keyset is wrapped: its key-encryption key comes from a Secret of its own, mounted
    # beside it, so the keyset's Secret alone gives no card key (for the claims workers too).
    security = settings["security"]
    assert security.get("kek_file") and not security.get("kek_env"), security
    keys_secret = volumes["keys"]["secret"]["secretName"]
    kek_volume = next(v for v in volumes.values() if "secret" in v and under(security["kek_file"],
                                                                               mount_of(container, v["name"])))
    assert kek_volume["secret"]["secretName"] != keys_secret, "the KEK must not sit in the keyset's Secret"
    # A non-root server in the fsGroup: kubelet then makes each Secret file root's, mode 0440,
    # group fsGroup, which is the one group-readable form txscore takes
    # (Keyset.AKubernetesSecretOfThePodsGroupIsTakenByANonRootServer runs a keyset so; this test
    # runs the server as its own user, with the files 0600).
    pod_security = pod["spec"]["securityContext"]
    assert pod_security.get("runAsNonRoot") and pod_security.get("runAsUser") and pod_security.get("fsGroup"), pod_security
    for volume in volumes.values():
        if "secret" in volume:
            assert volume["secret"].get("defaultMode") == 0o400, (volume["name"], "others or the group may not read")

    # Probes: the KServe v2 endpoints on the probe port (admin.probe_port: loopback, plain HTTP,
    # the health routes alone), as curl in the pod asks them, with no credential; the port is
    # not exposed, so no other pod reaches it (a flood of the admin port cannot fail a probe).
    expected = {"startupProbe": "/v2/health/live", "livenessProbe": "/v2/health/live",
                "readinessProbe": "/v2/health/ready"}
    secret_key_of = {os.path.join(tls_mount, item["path"]): item["key"] for item in volumes["tls"]["secret"]["items"]}
    probe_port = settings["admin"]["probe_port"]
    assert probe_port not in [p["containerPort"] for p in container["ports"]], "the probe port is for the pod alone"
    urls = {}
    for probe, path in expected.items():
        command = container[probe]["exec"]["command"]
        assert command == ["curl", "-sf", f"http://127.0.0.1:{probe_port}{path}"], (probe, command)
        urls[probe] = path
    # The grace period outlasts the stop: preStop, then stop_delay_ms, then drain_timeout_ms.
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    stop_s = settings["server"]["stop_delay_ms"] / 1000 + settings["server"]["drain_timeout_ms"] / 1000
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    assert grace > pre_stop + stop_s, (grace, pre_stop, stop_s)
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]

    # The Indexed Job: the completion index is the shard, of as many shards as completions.
    job = one(docs, "Job")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    worker = spec["template"]["spec"]["containers"][0]
    job_args = worker["args"]
    assert job_args[:2] == ["batch", "run"]
    assert job_args[job_args.index("--shard") + 1] == f"$(SHARD)/{spec['completions']}", job_args
    assert "$(SHARD)" in job_args[job_args.index("--output") + 1], "each shard needs its own output"
    shard_env = {e["name"]: e for e in worker["env"]}["SHARD"]
    assert shard_env["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    job_config = job_args[job_args.index("--config") + 1]
    assert os.path.basename(job_config) in generated["txscore-config"]
    job_settings = yaml.safe_load(open(os.path.join(base, os.path.basename(job_config))))
    job_volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    job_kek = next(v for v in job_volumes.values() if "secret" in v and under(
        job_settings["security"]["kek_file"], mount_of(worker, v["name"])))
    assert job_kek["secret"]["secretName"] == kek_volume["secret"]["secretName"], job_kek
    assert job_volumes["keys"]["secret"]["secretName"] == keys_secret
    claim = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}["data"]["persistentVolumeClaim"]["claimName"]
    pvc = one(docs, "PersistentVolumeClaim", claim)
    assert "ReadWriteMany" in pvc["spec"]["accessModes"]

    # One shard down at a time, at most, for voluntary disruptions.
    budget = one(docs, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1 and budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # The replicas' identity towards each other is theirs alone, admitted by the Thrift port.
    assert settings["sharding"]["peer_identities"] == ["txscore-shard"], settings["sharding"]["peer_identities"]
    assert "txscore-shard" in settings["security"]["tls"]["thrift_clients"]
    assert not set(settings["sharding"]["peer_identities"]) & {"txscore-client", "txscore-admin"}

    # NetworkPolicies: each port of the shards is open to named pods only (callers and the
    # replicas themselves on Thrift, monitoring on admin), and the claims workers to nothing.
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    opened = {}
    for policy in policies:
        selected = policy["spec"]["podSelector"]["matchLabels"]
        assert policy["spec"]["policyTypes"] == ["Ingress"], policy["metadata"]["name"]
        if not selected.items() <= labels.items():
            continue
        for rule in policy["spec"].get("ingress", []):
            assert rule.get("ports") and rule.get("from"), f"{policy['metadata']['name']}: a rule open to everyone"
            for source in rule["from"]:
                assert source.get("podSelector", {}).get("matchLabels"), \
                    f"{policy['metadata']['name']}: a source that is every pod of a namespace"
                # A pod label is anyone's to set: an empty namespaceSelector would admit a labelled
                # pod of every namespace.
                assert "namespaceSelector" not in source or source["namespaceSelector"].get("matchLabels"), \
                    f"{policy['metadata']['name']}: a source in every namespace"
            for port in rule["ports"]:
                opened.setdefault(port["port"], []).extend(
                    frozenset(source["podSelector"]["matchLabels"].items()) for source in rule["from"])
    assert set(opened) == set(ports), ("ports a policy opens", sorted(opened), sorted(ports))
    replicas = frozenset(labels.items())
    assert replicas in opened["thrift"], "the replicas must reach each other's Thrift port to forward"
    assert replicas not in opened["admin"], "a replica has no business on another's admin port"
    assert not set(opened["thrift"]) & set(opened["admin"]) - {replicas}, "callers and monitoring are told apart"
    job_labels = job["spec"]["template"].get("metadata", {}).get("labels", {})  # the pods', not the Job's
    job_policy = [p for p in policies if p["spec"]["podSelector"]["matchLabels"].items() <= job_labels.items()]
    assert job_policy and not any(p["spec"].get("ingress") for p in job_policy), "the claims workers listen on nothing"

    # The LLM overlay: the base, with the pipeline file replaced by one whose forensic stage is remote.
    overlay_kustomization = yaml.safe_load(open(os.path.join(overlay, "kustomization.yaml")))
    assert overlay_kustomization["resources"] == ["../base"]
    merge = overlay_kustomization["configMapGenerator"][0]
    assert merge["name"] == "txscore-config" and merge["behavior"] == "merge" and merge["files"] == ["pipeline.yaml"]
    remote = yaml.safe_load(open(os.path.join(overlay, "pipeline.yaml")))
    forensic = next(s for s in remote["stages"] if s["name"] == "forensic")
    assert forensic["placement"] == "remote" and forensic["remote"]["base_url"].endswith("/v1")
    print(f"ok   manifests: {sts['spec']['replicas']} shards named and addressed as the settings list them, "
          f"ports, probes ({', '.join(sorted(set(urls.values())))}), certificates, volumes, grace "
          f"{grace} s > {pre_stop + stop_s:.0f} s, Indexed Job of {spec['completions']}, llm-remote overlay")
    print(f"ok   keyset wrapped under a KEK of its own Secret ({kek_volume['secret']['secretName']}); probes on "
          f"127.0.0.1:{probe_port} with no credential; NetworkPolicies open thrift to {len(opened['thrift'])} and admin to "
          f"{len(opened['admin'])} pod label(s), the claims workers to none")
    return settings, urls, secret_key_of


def documented_tls_secret(base):
    """The txscore-tls Secret as kustomization.yaml says to make it: key -> file under PKI/."""
    text = open(os.path.join(base, "kustomization.yaml")).read()
    command = text[text.index("kubectl create secret generic txscore-tls"):]
    command = command[:command.index("\n#   kubectl") if "\n#   kubectl" in command else len(command)]
    command = command.split("\n# The server certificate")[0]
    return dict(re.findall(r"--from-file=([\w.]+)=PKI/([\w./]+)", command))


def identities(cert):
    san = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", cert],
                         capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"DNS:([^,\s]+)", san))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--txscore", required=True)
    parser.add_argument("--source", required=True)
    args = parser.parse_args()
    base = os.path.join(args.source, "deploy", "kubernetes", "base")
    overlay = os.path.join(args.source, "deploy", "kubernetes", "llm-remote")
    settings, urls, secret_key_of = check_manifests(base, overlay)
    models = os.path.join(args.source, "var", "models")
    for needed in ("fraud.ubj", "claims.ubj", "llm-tiny/config.json"):
        if not os.path.exists(os.path.join(models, needed)):
            sys.exit(f"missing var/models/{needed}: run ./scripts/setup.sh first")

    work = tempfile.mkdtemp(prefix="txscore-k8s-")
    server = None
    try:
        # The pod's absolute paths, mapped into the scratch folder.
        mapping = {"/etc/txscore/config": os.path.join(work, "config"), "/etc/txscore/keys": os.path.join(work, "keys"),
                   "/etc/txscore/kek": os.path.join(work, "kek"),
                   "/etc/txscore/tls": os.path.join(work, "tls"), "/var/lib/txscore": os.path.join(work, "data"),
                   "/opt/txscore/models": models, "/data": os.path.join(work, "claims-data")}
        for path in mapping.values():
            os.makedirs(path, exist_ok=True)
        # The demo PKI as kustomization.yaml says to make it: the server certificate names the pods.
        pki = os.path.join(work, "pki")
        r = subprocess.run([os.path.join(args.source, "scripts", "make-demo-pki.sh"), pki],
                           capture_output=True, text=True,
                           env=dict(os.environ, TXSCORE_PKI_SERVER_NAMES="txscore-0.txscore,txscore-1.txscore,"
                                                                          "txscore-2.txscore,txscore-scoring"))
        assert r.returncode == 0, r.stderr
        # The txscore-tls Secret made as documented, mounted as the StatefulSet mounts it.
        secret = documented_tls_secret(base)
        for path, key in secret_key_of.items():
            assert key in secret, f"the StatefulSet mounts {key}, which the documented Secret lacks"
            target = path.replace("/etc/txscore/tls", mapping["/etc/txscore/tls"], 1)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy(os.path.join(pki, secret[key]), target)
            os.chmod(target, 0o600)
        tls_dir = mapping["/etc/txscore/tls"]
        server_names = identities(os.path.join(tls_dir, "server", "tls.crt"))
        for shard in settings["sharding"]["shards"]:
            assert shard["address"].rsplit(":", 1)[0] in server_names, (shard, server_names)
        # No operator's credential is in the Secret the pods mount, let alone in a pod.
        operators = set(settings["security"]["tls"]["operators"])
        for key, file in secret.items():
            if key.endswith(".crt"):
                assert not identities(os.path.join(pki, file)) & operators, f"{key} is an operator's certificate"
        # Nor the monitoring identity's: the probes need none, and it is Prometheus's to hold.
        admin_only = set(settings["security"]["tls"]["admin_clients"]) - set(settings["security"]["tls"]["thrift_clients"])
        assert admin_only, settings["security"]["tls"]
        for path in secret_key_of:
            if path.endswith(".crt") and not path.endswith("ca.crt"):
                mounted = path.replace("/etc/txscore/tls", tls_dir, 1)
                assert not identities(mounted) & admin_only, f"{path} names {identities(mounted) & admin_only}"
        # The keyset wrapped under the KEK, as kustomization.yaml says to make them.
        kek = os.path.join(mapping["/etc/txscore/kek"], "kek")
        with open(kek, "w") as f:
            f.write(subprocess.run(["openssl", "rand", "-hex", "32"], capture_output=True, text=True, check=True).stdout)
        os.chmod(kek, 0o600)
        keyset = os.path.join(mapping["/etc/txscore/keys"], "keyset.json")
        r = subprocess.run([args.txscore, "keys", "create", "--kek-file", kek, "--out", keyset],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert "secret_hex" not in open(keyset).read(), "the keyset Secret would hold the card keys in clear"

        # One pass: a path begins after a space, colon or bracket, and a replaced path is not
        # looked at again.
        pattern = re.compile(r"(?<=[\s:\[,])(" + "|".join(re.escape(p) for p in mapping) + r")(?=[/\s,\]]|$)", re.M)

        def place(text):
            text = pattern.sub(lambda m: mapping[m.group(1)], text)
            return text.replace("port: 9090", "port: 0").replace("port: 9091", "port: 0").replace("port: 9092", "port: 0")

        config = mapping["/etc/txscore/config"]
        for name in ("txscore.yaml", "pipeline.yaml", "batch.yaml", "claims.yaml"):
            with open(os.path.join(base, name)) as f:
                text = place(f.read())
            with open(os.path.join(config, name), "w") as f:
                f.write(text)
        for config_file in ("txscore.yaml", "batch.yaml"):
            r = subprocess.run([args.txscore, "plan", "--config", os.path.join(config, config_file)],
                               capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, (config_file, r.stdout, r.stderr)
        # The llm-remote overlay's pipeline loads too (the pool is not called by plan).
        remote_config = os.path.join(work, "remote")
        shutil.copytree(config, remote_config)
        with open(os.path.join(overlay, "pipeline.yaml")) as f:
            text = place(f.read())
        with open(os.path.join(remote_config, "pipeline.yaml"), "w") as f:
            f.write(text)
        r = subprocess.run([args.txscore, "plan", "--config", os.path.join(remote_config, "txscore.yaml")],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (r.stdout, r.stderr)
        print("ok   the ConfigMap's settings and pipelines (and the overlay's) load: txscore plan")

        server = subprocess.Popen([args.txscore, "serve", "--config", os.path.join(config, "txscore.yaml"),
                                   "--shard-name", "txscore-1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        line = server.stdout.readline()
        assert line.startswith("listening "), (line, server.stderr.read() if server.poll() is not None else "")
        ports = dict(kv.split("=") for kv in line.split()[1:])
        # The probes as the pod runs them: plain HTTP on the probe port, on loopback. It serves
        # the health endpoints and nothing else (no reload, no metrics).
        for probe, path in sorted(urls.items()):
            with urllib.request.urlopen(f"http://127.0.0.1:{ports['probe_port']}{path}", timeout=30) as answer:
                assert answer.status == 200, (probe, answer.status)
        for method, path in (("POST", "/admin/reload"), ("GET", "/metrics")):
            try:
                urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{ports['probe_port']}{path}",
                                                              method=method, data=b"" if method == "POST" else None),
                                       timeout=30)
                raise AssertionError(f"the probe port answered {method} {path}")
            except urllib.error.HTTPError as refused:
                assert refused.code == 404, (path, refused.code)
        started = time.monotonic()
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=120) == 0, server.stderr.read()
        stopped_in = time.monotonic() - started
        grace = yaml.safe_load(open(os.path.join(base, "statefulset.yaml")))["spec"]["template"]["spec"][
            "terminationGracePeriodSeconds"]
        assert stopped_in < grace, (stopped_in, grace)
        server = None
        print(f"ok   txscore serve on the pod's settings as shard txscore-1: the probes' endpoints answer 200; "
              f"SIGTERM stopped it in {stopped_in:.1f} s (grace period {grace} s)")
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
