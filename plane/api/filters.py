"""The list filters of every endpoint (django-filter), refusing a value they cannot use.

django-filter drops a filter whose value is empty, so `?state=` listed everything, though the
API documents `state` as one of its values. An empty value of a filter on a choice, a number,
a yes/no or another object is a 400 naming the parameter, as a wrong value already was. A
filter on text (a name) still takes an empty value as no filter: the schema allows it.
"""
from django_filters import CharFilter
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.exceptions import ValidationError


class FilterBackend(DjangoFilterBackend):
    def get_filterset(self, request, queryset, view):
        filterset = super().get_filterset(request, queryset, view)
        if filterset is not None:
            empty = {name: ["must not be empty: give one of the values the API documents."]
                     for name, field in filterset.filters.items()
                     if request.query_params.get(name) == "" and not isinstance(field, CharFilter)}
            if empty:
                raise ValidationError(empty)
        return filterset
