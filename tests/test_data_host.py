"""`strata up --data-host` puts every data service on one address (what clients are told
too), the web server staying on --host; a service's own option still wins."""
from console.cli.main import _parser
from services.block.up import runtime_kwargs
from services.file.daemons import file_bind
from services.object.up import s3_address


def up_options(*argv) -> dict:
    args = _parser()[0].parse_args(["up", *argv])
    return {k: v for k, v in vars(args).items() if k not in ("cmd", "data_dir", "json")}


def test_data_host_binds_s3_nfs_smb_and_block_and_the_own_options_win():
    o = up_options("--data-host", "10.20.30.40", "--s3-port", "9100")
    assert o["host"] == "127.0.0.1"                          # the console stays on loopback
    assert s3_address(o) == ("10.20.30.40", 9100)
    assert file_bind(o) == "10.20.30.40"
    assert runtime_kwargs("/nonexistent", o)["host"] == "10.20.30.40"   # iSCSI portal, NBD

    o = up_options("--data-host", "10.20.30.40", "--block-host", "10.9.9.9",
                   "--file-bind", "0.0.0.0")
    assert runtime_kwargs("/nonexistent", o)["host"] == "10.9.9.9"
    assert file_bind(o) == "0.0.0.0" and s3_address(o)[0] == "10.20.30.40"

    o = up_options("--host", "192.0.2.7")                     # without it: --host, as before
    assert s3_address(o)[0] == file_bind(o) == runtime_kwargs("/x", o)["host"] == "192.0.2.7"
