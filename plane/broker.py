"""The broker's Redis (Celery's, shared by every worker): one client and connection pool per
URL, for the run locks and the I/O budget."""
import functools

import redis
from django.conf import settings

from plumbing.redisurl import redis_from_url

_client = functools.cache(redis_from_url)


def redis_client() -> redis.Redis:
    return _client(settings.CELERY_BROKER_URL)
