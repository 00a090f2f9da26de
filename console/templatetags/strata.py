from django import template

from plane.cli.output import human_bytes

register = template.Library()


@register.filter
def bytes_(value):
    return human_bytes(value)


@register.simple_tag
def percent(used, size):
    try:
        return min(100, round(100 * used / size)) if size else 0
    except (TypeError, ValueError):
        return 0
