"""The demo configuration exactly as shipped (config/txscore.yaml, batch.yaml, pipeline.yaml,
claims.yaml and lists/), placed in a scratch folder for a test: only the two ports set to 0 and
the emulated device's library named where this build put it. Needs scripts/setup.sh to have
made var/ (the demo key, models and LLM checkpoint)."""
import os
import shutil
import subprocess
import sys
from types import SimpleNamespace


def prepare_demo(source, txscore, work):
    """Writes work/config and work/var; returns their paths, the settings and pipeline files,
    and the demo PKI's folders (pki, client, admin)."""
    repo_var = os.path.join(os.path.abspath(source), "var")
    for needed in ("keyset.json", "models/fraud.ubj", "models/claims.ubj", "models/llm-tiny/config.json"):
        if not os.path.exists(os.path.join(repo_var, needed)):
            sys.exit(f"missing var/{needed}: run ./scripts/setup.sh first")
    config_dir, var = os.path.join(work, "config"), os.path.join(work, "var")
    os.makedirs(config_dir)
    os.makedirs(var)
    for name in ("txscore.yaml", "batch.yaml", "pipeline.yaml", "claims.yaml"):
        with open(os.path.join(source, "config", name)) as f:
            text = f.read()
        # The emulated device's library, as the shipped settings name it from the repository
        # (../build/...), is named here where this build put it.
        shipped_library = "backend_library: ../build/libtxscore_emulated_device.so"
        if name in ("txscore.yaml", "batch.yaml"):
            assert shipped_library in text, name
            text = text.replace(shipped_library, "backend_library: " + os.path.join(
                os.path.dirname(os.path.abspath(txscore)), "libtxscore_emulated_device.so"))
        if name == "txscore.yaml":
            assert "  port: 9090\n" in text and "  port: 9091\n" in text
            text = text.replace("  port: 9090\n", "  port: 0\n").replace("  port: 9091\n", "  port: 0\n")
        with open(os.path.join(config_dir, name), "w") as f:
            f.write(text)
    shutil.copytree(os.path.join(source, "config", "lists"), os.path.join(config_dir, "lists"))
    os.symlink(os.path.join(repo_var, "models"), os.path.join(var, "models"))
    shutil.copy(os.path.join(repo_var, "keyset.json"), os.path.join(var, "keyset.json"))
    os.chmod(os.path.join(var, "keyset.json"), 0o600)
    # The demo PKI, as scripts/setup.sh makes it for the shipped settings (var/pki).
    pki = os.path.join(var, "pki")
    r = subprocess.run([os.path.join(source, "scripts", "make-demo-pki.sh"), pki], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return SimpleNamespace(config_dir=config_dir, var=var, settings=os.path.join(config_dir, "txscore.yaml"),
                           pipeline=os.path.join(config_dir, "pipeline.yaml"), pki=pki,
                           client_dir=os.path.join(pki, "client"), admin_dir=os.path.join(pki, "admin"))


def start_server(txscore, settings):
    """`txscore serve --config settings`; returns the process and its ports once it listens."""
    server = subprocess.Popen([txscore, "serve", "--config", settings], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    first = server.stdout.readline()
    assert first.startswith("listening thrift_port="), (first, server.stderr.read() if server.poll() else "")
    ports = dict(part.split("=") for part in first.split()[1:])
    return server, ports
