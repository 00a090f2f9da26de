"""`strata up --tls`: the API, the console and S3 over HTTPS with a certificate the appliance
makes at its first start (and keeps), clients that trust it (boto3 ``verify=``, the CLI,
requests) work, plain HTTP and clients that do not trust it fail."""
import json
import re

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import SSLError as BotoSSLError

from plumbing import tls
from tests.appliance import Appliance


def test_certificate_is_made_once_and_reused(tmp_path):
    first = tls.certificate(tmp_path, hosts=["10.1.2.3", "s3.example", "*.localhost"])
    again = tls.certificate(tmp_path)
    assert first.generated and again == first
    assert re.fullmatch(r"([0-9A-F]{2}:){31}[0-9A-F]{2}", first.fingerprint)
    with pytest.raises(tls.TlsError, match="both --tls-cert and --tls-key"):
        tls.certificate(tmp_path, cert=first.cert)
    with pytest.raises(tls.TlsError, match="cannot use certificate"):
        tls.certificate(tmp_path, cert=first.key, key=first.key)


@pytest.fixture
def tls_appliance():
    app = Appliance(tls=True)
    yield app
    app.destroy()


def _s3(app, creds, **kwargs):
    return boto3.client("s3", endpoint_url=creds["s3_endpoint"],
                        aws_access_key_id=creds["s3_access_key"],
                        aws_secret_access_key=creds["s3_secret_key"], region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}), **kwargs)


def _get_json(url: str, cert: str) -> tuple[int, dict]:
    r = requests.get(url, verify=cert, timeout=10)
    return r.status_code, r.json()


def _sign_in(app, creds, cert) -> tuple[int, str, list]:
    """Sign in to the console; (status, page, cookies) of the dashboard."""
    with requests.Session() as web:  # verify= per request: REQUESTS_CA_BUNDLE overrides a session's
        page = web.get(f"{app.url}/login/", timeout=10, verify=cert)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        dash = web.post(f"{app.url}/login/", timeout=10, verify=cert,
                        headers={"Referer": f"{app.url}/login/"},
                        data={"csrfmiddlewaretoken": token, "username": creds["username"],
                              "password": creds["password"], "next": "/"})
    return dash.status_code, dash.text, list(web.cookies)


@pytest.mark.root
def test_up_with_tls_serves_https_only(tls_appliance):
    app = tls_appliance.start()
    try:
        creds = app.credentials
        cert = str(app.tls_cert)
        assert creds["ca_bundle"] == cert
        assert creds["tls_fingerprint"] == tls.fingerprint(cert)
        assert creds["api_url"].startswith("https://")
        assert creds["s3_endpoint"] == f"https://127.0.0.1:{app.s3_port}"

        # S3 with the certificate as CA bundle: PUT and GET
        s3 = _s3(app, creds, verify=cert)
        s3.create_bucket(Bucket="secure")
        s3.put_object(Bucket="secure", Key="weights.bin", Body=b"w" * 100_000)
        assert s3.get_object(Bucket="secure", Key="weights.bin")["Body"].read() == b"w" * 100_000
        # a client that does not trust it fails verification
        with pytest.raises(BotoSSLError):
            _s3(app, creds).list_buckets()

        # the API over HTTPS: the CLI trusts credentials.json's ca_bundle, requests with verify=
        r = app.cli("--json", "bucket", "list")
        assert r.returncode == 0, r.stderr
        assert [b["name"] for b in json.loads(r.stdout)] == ["secure"]
        status, health = _get_json(f"{app.url}/api/v1/health", cert)
        assert status == 200
        daemons = {n: d for s in health["services"].values() for n, d in s.items()}
        assert daemons["s3"]["endpoint"].startswith("https://")
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(f"{app.url}/api/v1/health", timeout=10)
        # plain HTTP is not answered on either port
        for port in (app.port, app.s3_port):
            with pytest.raises(requests.exceptions.ConnectionError):
                requests.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=10)

        # the console signs in over HTTPS and tells how to trust the certificate
        status, dashboard, cookies = _sign_in(app, creds, cert)
        assert status == 200 and "Sign in" not in dashboard, dashboard[:500]
        assert creds["tls_fingerprint"] in dashboard and cert in dashboard
        assert all(c.secure for c in cookies)

        # clients keep idle connections in their pools (never reading them) while it stops
        idle = requests.Session()
        assert idle.get(f"{app.url}/api/v1/health", verify=cert, timeout=10).status_code == 200
        s3.head_object(Bucket="secure", Key="weights.bin")
    finally:
        out = app.stop()
    assert f"SHA-256 fingerprint: {tls.fingerprint(cert)}" in out, out
    # the web server and the gateway stopped by themselves, none was killed
    assert "did not stop" not in out and "Strata stopped." in out, out
    idle.close()
