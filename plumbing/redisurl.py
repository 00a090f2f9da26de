"""The one parser of Strata's Redis URLs: ``redis://``, ``unix://`` and kombu's
``redis+socket:///path?virtual_host=N`` (the broker URL `strata up` uses)."""
import redis


def redis_from_url(url: str, timeout: float | None = None) -> redis.Redis:
    """A client of the Redis at ``url``: ``redis://``, ``unix://`` or kombu's
    ``redis+socket:///path?virtual_host=N`` (the broker URL `strata up` uses)."""
    kw = {} if timeout is None else {"socket_timeout": timeout,
                                     "socket_connect_timeout": timeout}
    if url.startswith("redis+socket://"):
        path, _, query = url[len("redis+socket://"):].partition("?")
        db = dict(p.split("=", 1) for p in query.split("&") if "=" in p).get("virtual_host")
        return redis.Redis(unix_socket_path=path, db=int(db or 0), **kw)
    return redis.Redis.from_url(url, **kw)
