"""Responses shared by every service's API."""
from rest_framework import status
from rest_framework.response import Response

from plane.api.serializers import JobSerializer


def job_accepted(job, request) -> Response:
    """202 with the job's URL (in the body and the Location header) for a started Job."""
    data = JobSerializer(job, context={"request": request}).data
    url = str(data["url"])  # a Hyperlink object; WSGI headers must be plain str
    return Response({**data, "job": url, "url": url}, status=status.HTTP_202_ACCEPTED,
                    headers={"Location": url})
