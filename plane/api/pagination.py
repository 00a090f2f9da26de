"""Pages of every list endpoint: `limit` (1..1000, default 100) and `offset` (0..2**63-1).
A value out of range, empty or not an integer is a 400 naming the parameter, not a silent
default or a database overflow."""
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination

MAX_OFFSET = 2**63 - 1


def query_integer(request, name: str, low: int, high: int, default: int) -> int:
    """The query parameter ``name`` as an integer from ``low`` to ``high`` (``default`` when
    absent); ValidationError (a 400 naming it) when it is anything else."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError({name: [f"must be an integer from {low} to {high}."]}) from None
    if not low <= value <= high:
        raise ValidationError({name: [f"must be an integer from {low} to {high}."]})
    return value


class Pagination(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000

    def get_limit(self, request):
        return query_integer(request, self.limit_query_param, 1, self.max_limit, self.default_limit)

    def get_offset(self, request):
        return query_integer(request, self.offset_query_param, 0, MAX_OFFSET, 0)

    def get_schema_operation_parameters(self, view):
        params = super().get_schema_operation_parameters(view)
        for param in params:
            if param["name"] == self.limit_query_param:
                param["schema"].update(minimum=1, maximum=self.max_limit)
            elif param["name"] == self.offset_query_param:
                param["schema"].update(minimum=0, maximum=MAX_OFFSET)
        return params
