"""Stopping a gateway that serves HTTPS while S3 clients keep idle connections in their
pools: it stops on SIGTERM by itself (a clean TLS close would wait for each client's
close_notify, which an idle pooled connection never sends), and the clients carry on against
the gateway started again."""
from __future__ import annotations

import signal

from plumbing import tls
from services.object.tests.gatewayproc import GatewayProcess


def test_an_https_gateway_stops_on_sigterm_with_idle_clients_and_they_carry_on(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    tls.make_self_signed(cert, key, [])
    gw = GatewayProcess(str(tmp_path), tls=(str(cert), str(key)))
    gw.start()
    clients = [gw.client(), gw.client()]
    try:
        clients[0].create_bucket(Bucket="idle")
        for i, client in enumerate(clients):
            client.put_object(Bucket="idle", Key=f"k{i}", Body=b"before %d" % i)
        gw.stop()  # SIGTERM; after 10 s the kit kills it
        # uvicorn ends by raising the signal it caught again: -15 is its own stop, -9 the kit's kill
        assert gw.proc.returncode in (0, -signal.SIGTERM), \
            f"the gateway did not stop by itself (exit {gw.proc.returncode})"
        gw.start()
        for i, client in enumerate(clients):  # their pooled connections were cut: they open new ones
            assert client.get_object(Bucket="idle", Key=f"k{i}")["Body"].read() == b"before %d" % i
    finally:
        gw.stop()
