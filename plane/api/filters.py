"""The list filters of every endpoint (django-filter), refusing a value they cannot use.

django-filter drops a filter whose value it cannot read: `?state=` and `?admin=maybe` listed
everything, though the API documents `state` as one of its values and `admin` as a boolean.
Such a value is a 400 naming the parameter, as a wrong choice or number already was, and so
is a fraction for a whole-number field (`?step=0.5`). A filter
on text (a name) still takes an empty value as no filter: the schema allows it.
"""
import re

from django.db import models
from django_filters import BooleanFilter, CharFilter, NumberFilter
from django_filters.rest_framework import DjangoFilterBackend
from django_filters.utils import get_model_field
from rest_framework.exceptions import ValidationError

BOOLEANS = {"true", "false", "1", "0"}  # what django-filter's BooleanWidget reads
INTEGER = re.compile(r"^-?[0-9]+$")


def _refusal(filterset, field, value: str) -> str | None:
    if value == "" and not isinstance(field, CharFilter):
        return "must not be empty: give one of the values the API documents."
    if isinstance(field, BooleanFilter) and value.lower() not in BOOLEANS:
        return "must be true or false."
    # django-filter reads every number as a decimal: ?step=0.5 listed nothing instead of
    # saying that a step is a whole number
    if isinstance(field, NumberFilter) and not INTEGER.match(value) and isinstance(
            get_model_field(filterset._meta.model, field.field_name), models.IntegerField):
        return "must be a whole number."
    return None


class FilterBackend(DjangoFilterBackend):
    def get_filterset(self, request, queryset, view):
        filterset = super().get_filterset(request, queryset, view)
        if filterset is not None:
            refused = {name: [why] for name, field in filterset.filters.items()
                       if name in request.query_params
                       and (why := _refusal(filterset, field, request.query_params[name]))}
            if refused:
                raise ValidationError(refused)
        return filterset
