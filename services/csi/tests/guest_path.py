"""csi-sanity's path commands for a node plugin in a guest (``--csi.createmountpathcmd`` and
the like take one argument, the path): ``python -m services.csi.tests.guest_path ACTION
HOST:AGENT_PORT PATH`` makes, checks or removes PATH in the guest through the test agent
(guest_node.py). ``mkdir`` prints the path made; ``check`` prints file, directory,
not_found or other; ``rm`` removes it (an empty directory or a file)."""
import json
import socket
import sys

SCRIPTS = {
    "mkdir": 'mkdir -p "$1" && echo "$1"',
    "check": 'if [ ! -e "$1" ]; then echo not_found; elif [ -d "$1" ]; then echo directory; '
             'elif [ -f "$1" ]; then echo file; else echo other; fi',
    "rm": 'if [ -d "$1" ]; then rmdir "$1"; else rm -f "$1"; fi',
}


def main(action: str, agent: str, path: str) -> int:
    host, _, port = agent.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(json.dumps({"argv": ["sh", "-c", SCRIPTS[action], "sh", path],
                              "timeout": 50}).encode() + b"\n")
        reply = json.loads(s.makefile().readline())
    sys.stdout.write(bytes.fromhex(reply["out"]).decode())
    sys.stderr.write(reply["err"])
    return reply["rc"]


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
