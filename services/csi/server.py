"""Run the CSI plugin: ``python -m services.csi --endpoint unix:///csi/csi.sock ...``.

``--mode controller`` serves Identity and Controller (the Deployment beside the external
provisioner, attacher, snapshotter and resizer sidecars); ``--mode node`` serves Identity and
Node (the DaemonSet on every node); ``--mode all`` serves the three, as csi-sanity asks."""
import argparse
import logging
import os
import signal
import threading
from concurrent import futures

import grpc

from services.csi.controller import Controller
from services.csi.identity import Identity
from services.csi.node import Node
from services.csi.plane import PlaneConfig
from services.csi.proto import csi_pb2_grpc


def build_server(endpoint: str, mode: str, plane: PlaneConfig | None,
                 node_id: str | None = None, node_address: str = "",
                 workers: int = 8) -> grpc.Server:
    """A started-ready (not started) gRPC server bound to ``endpoint`` (unix://PATH, or
    tcp://HOST:PORT / HOST:PORT: a node plugin reached over the network)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    serves_controller = mode in ("controller", "all")
    csi_pb2_grpc.add_IdentityServicer_to_server(
        Identity(plane if serves_controller else None, controller=serves_controller), server)
    if serves_controller:
        csi_pb2_grpc.add_ControllerServicer_to_server(Controller(plane), server)
    if mode in ("node", "all"):
        csi_pb2_grpc.add_NodeServicer_to_server(Node(node_id, node_address), server)
    if endpoint.startswith("unix://"):
        path = endpoint.removeprefix("unix://")
        if os.path.exists(path):
            os.unlink(path)  # a socket left by a previous run of the plugin
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    if endpoint.startswith("tcp://"):
        endpoint = endpoint.removeprefix("tcp://")
    if server.add_insecure_port(endpoint) == 0:
        raise SystemExit(f"cannot listen on {endpoint}")
    return server


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.csi", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoint", default=os.environ.get("CSI_ENDPOINT",
                                                             "unix:///csi/csi.sock"))
    parser.add_argument("--mode", choices=["controller", "node", "all"], default="all")
    parser.add_argument("--plane-url", default=os.environ.get("STRATA_URL"),
                        help="the plane's API, e.g. https://strata.example:8080")
    parser.add_argument("--token-file", help="file holding the API token used when a call "
                        "brings no 'token' secret (default: $STRATA_TOKEN)")
    parser.add_argument("--ca-bundle", help="CA certificates to trust for the plane's TLS")
    parser.add_argument("--node-id", default=os.environ.get("CSI_NODE_ID"),
                        help="this node's name (default: the host name)")
    parser.add_argument("--node-address", default=os.environ.get("CSI_NODE_ADDRESS", ""),
                        help="the address the appliance sees this node from (default: the "
                        "host name's)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(message)s")
    plane = None
    if args.mode != "node":
        if not args.plane_url:
            parser.error("--plane-url (or STRATA_URL) is required for the controller")
        token = os.environ.get("STRATA_TOKEN")
        if args.token_file:
            with open(args.token_file) as fh:
                token = fh.read().strip()
        plane = PlaneConfig(args.plane_url, token, args.ca_bundle)
    server = build_server(args.endpoint, args.mode, plane, args.node_id,
                          args.node_address)
    server.start()
    logging.info("strata CSI plugin (%s) listening on %s", args.mode, args.endpoint)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=5).wait()
