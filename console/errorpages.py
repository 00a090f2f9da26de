"""What a request Django itself cannot route or answer gets: under /api/ the API's JSON error
body (`{"error", "detail"}`), elsewhere Django's default page."""
from django.http import JsonResponse
from django.views import defaults


def _api(request) -> bool:
    return request.path.startswith("/api/")


def not_found(request, exception=None):
    if _api(request):
        return JsonResponse({"error": "not_found",
                             "detail": f"No API resource at {request.path}."}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request):
    if _api(request):
        return JsonResponse({"error": "server_error",
                             "detail": "The server failed; the log has the details."}, status=500)
    return defaults.server_error(request)


def bad_request(request, exception=None):
    if _api(request):
        return JsonResponse({"error": "bad_request", "detail": "Malformed request."}, status=400)
    return defaults.bad_request(request, exception)


def permission_denied(request, exception=None):
    if _api(request):
        return JsonResponse({"error": "permission_denied",
                             "detail": "You do not have permission to perform this action."},
                            status=403)
    return defaults.permission_denied(request, exception)
