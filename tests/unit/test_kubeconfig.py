"""Finding the API server and authenticating, from a kubeconfig or in-cluster, for real over
TLS: an HTTPS server that requires what each kind of credential provides."""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dradriver.apiserver import kubeconfig
from dradriver.apiserver.kubeapi import ApiError, KubeApi
from dradriver.apiserver.kubeconfig import KubeconfigError
from localcluster.certs import CertificateAuthority


class Server:
    """HTTPS on 127.0.0.1 trusting `ca` for client certificates; answers who called."""

    def __init__(self, ca: CertificateAuthority, tmp: Path) -> None:
        self.tokens = {"good-token"}
        serving = ca.issue("server", "localhost", server=True, ips=("127.0.0.1",))
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                peer = self.connection.getpeercert()  # type: ignore[attr-defined]
                user = dict(x[0] for x in peer["subject"])["commonName"] if peer else None
                auth = self.headers.get("Authorization", "")
                if auth.startswith("Bearer ") and auth[7:] not in outer.tokens:
                    self.send_response(401)
                    body = b'{"reason": "Unauthorized", "message": "bad token"}'
                else:
                    self.send_response(200)
                    body = json.dumps({"cert": user, "auth": auth}).encode()
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca.pair.cert))
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.load_cert_chain(str(serving.cert), str(serving.key))
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def ca(tmp_path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path / "pki")


@pytest.fixture
def server(ca, tmp_path) -> Iterator[Server]:
    s = Server(ca, tmp_path)
    try:
        yield s
    finally:
        s.close()


def write_kubeconfig(path: Path, server: str, user: dict, cluster: dict | None = None) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "here",
        "contexts": [{"name": "here", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "u", "user": user}],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def whoami(path: Path) -> dict:
    return dict(KubeApi(str(path)).request("GET", "/whoami"))


def test_token_and_ca_data(server, ca, tmp_path):
    cfg = write_kubeconfig(
        tmp_path / "kc",
        server.url,
        {"token": "good-token"},
        {"certificate-authority-data": b64(ca.pair.cert_pem())},
    )
    assert whoami(cfg) == {"cert": None, "auth": "Bearer good-token"}


def test_client_certificate_data_is_kept_in_private_files(server, ca, tmp_path):
    client = ca.issue("client", "system:node:n1", client=True)
    cfg = write_kubeconfig(
        tmp_path / "kc",
        server.url,
        {
            "client-certificate-data": b64(client.cert_pem()),
            "client-key-data": b64(client.key_pem()),
        },
        {"certificate-authority": str(ca.pair.cert)},
    )
    assert whoami(cfg)["cert"] == "system:node:n1"
    key = Path(kubeconfig.load(str(cfg)).credentials.cert[1])  # type: ignore[index]
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_relative_paths_are_relative_to_the_kubeconfig(server, ca, tmp_path):
    (tmp_path / "conf").mkdir()
    client = ca.issue("client", "relative-user", client=True)
    for name, data in (("ca.crt", ca.pair.cert_pem()), ("c.crt", client.cert_pem()),
                       ("c.key", client.key_pem())):  # fmt: skip
        (tmp_path / "conf" / name).write_bytes(data)
    cfg = write_kubeconfig(
        tmp_path / "conf" / "kc",
        server.url,
        {"client-certificate": "c.crt", "client-key": "c.key"},
        {"certificate-authority": "ca.crt"},
    )
    assert whoami(cfg)["cert"] == "relative-user"


def test_token_file_is_read_again_after_a_401(server, ca, tmp_path):
    token = tmp_path / "token"
    token.write_text("good-token\n")
    cfg = write_kubeconfig(
        tmp_path / "kc", server.url, {"tokenFile": str(token)},
        {"certificate-authority": str(ca.pair.cert)},
    )  # fmt: skip
    api = KubeApi(str(cfg))
    assert api.request("GET", "/x")["auth"] == "Bearer good-token"
    server.tokens = {"rotated"}
    token.write_text("rotated")
    assert api.request("GET", "/x")["auth"] == "Bearer rotated"


def test_exec_plugin_token_is_cached_until_refused(server, ca, tmp_path):
    counter = tmp_path / "runs"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, os, pathlib, sys\n"
        f"runs = pathlib.Path({str(counter)!r})\n"
        "n = int(runs.read_text()) + 1 if runs.exists() else 1\n"
        "runs.write_text(str(n))\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "assert info['spec']['interactive'] is False and os.environ['EXTRA'] == 'yes'\n"
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',\n"
        "                  'status': {'token': f'tok-{n}'}}))\n"
    )
    cfg = write_kubeconfig(
        tmp_path / "kc",
        server.url,
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                  "args": [str(plugin)], "env": [{"name": "EXTRA", "value": "yes"}]}},
        {"certificate-authority": str(ca.pair.cert)},
    )  # fmt: skip
    server.tokens = {"tok-1"}
    api = KubeApi(str(cfg))
    assert api.request("GET", "/x")["auth"] == "Bearer tok-1"
    assert api.request("GET", "/x")["auth"] == "Bearer tok-1"
    assert counter.read_text() == "1"
    server.tokens = {"tok-2"}  # the server stops accepting tok-1: run the plugin again
    assert api.request("GET", "/x")["auth"] == "Bearer tok-2"


def test_a_refused_token_is_an_api_error_after_one_retry(server, ca, tmp_path):
    trust = {"certificate-authority": str(ca.pair.cert)}
    cfg = write_kubeconfig(tmp_path / "kc", server.url, {"token": "stale"}, trust)
    with pytest.raises(ApiError, match="401 Unauthorized: bad token"):
        KubeApi(str(cfg)).request("GET", "/x")


def test_an_untrusted_server_is_refused(server, tmp_path):
    other = CertificateAuthority(tmp_path / "other")
    cfg = write_kubeconfig(
        tmp_path / "kc", server.url, {"token": "good-token"},
        {"certificate-authority": str(other.pair.cert)},
    )  # fmt: skip
    with pytest.raises(ApiError, match="CERTIFICATE_VERIFY_FAILED"):
        KubeApi(str(cfg)).request("GET", "/x")


def test_in_cluster_uses_the_service_account(tmp_path):
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("sa-token")
    cfg = kubeconfig.in_cluster(
        {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, sa
    )
    assert cfg.server == "https://[fd00::1]:443" and cfg.ca_file == str(sa / "ca.crt")
    assert cfg.credentials.authorization() == "Bearer sa-token"
    with pytest.raises(KubeconfigError, match="not running in a pod"):
        kubeconfig.in_cluster({}, sa)


@pytest.mark.parametrize(
    "user,message",
    [
        ({"auth-provider": {"name": "oidc"}}, "auth-provider is not supported"),
        ({"client-certificate": "x.crt"}, "needs its key"),
        ({"exec": {"apiVersion": "v0", "command": "x"}}, "exec apiVersion 'v0'"),
    ],
)
def test_unsupported_or_broken_users_are_refused_clearly(tmp_path, user, message):
    cfg = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:1", user)
    with pytest.raises(KubeconfigError, match=message):
        kubeconfig.load(str(cfg))


def test_a_missing_context_names_the_file(tmp_path):
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump({"current-context": "nope", "contexts": []}))
    with pytest.raises(KubeconfigError, match=f"kubeconfig {path}: no context named 'nope'"):
        kubeconfig.load(str(path))
