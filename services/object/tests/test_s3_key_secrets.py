"""A secret a user gives for an S3 key must be hard to guess (issue 34: sixteen zeros were
accepted): weak ones are a 400 naming secret_key, and no key is made."""
import pytest

from services.object.models import S3Key

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("secret", [
    "0" * 16,                              # one character
    "abcdabcdabcdabcd",                    # a short pattern repeated
    "abcabcabcabcabcabcabcab",             # ... with a partial last repeat
    "0123456789abcdef",                    # a run
    "zyxwvutsrqponmlkjihgfedcba",          # a run downwards
    "aaaaaaaabbbbbbbbcccccccc",            # three different characters
])
def test_a_weak_secret_is_a_400_naming_secret_key(api, secret):
    r = api.post("/api/v1/s3-keys/", {"secret_key": secret}, format="json")
    assert r.status_code == 400 and "secret_key" in r.json()["fields"], r.content
    assert not S3Key.objects.filter(system=False).exists()
