import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
application = get_asgi_application()

from services.nodes.tasks import started_hearing  # noqa: E402  (Django set up first)

started_hearing()   # heartbeats sent while the web server was away went unheard
