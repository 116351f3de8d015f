"""What every config section shares: strict validation (no bool for a number, no "3" for 3, no unknown key) and
F, a field with its default and its documentation."""

from __future__ import annotations

from typing import Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, field_validator


def F(default, description: str, **limits):  # noqa: N802 - a field with its documentation
    return Field(default, description=description, **limits)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)  # no bool for an int, no "3" for 3

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value, info):
        """Strict mode still lets true match Literal[1, 2] (True == 1): a choice of numbers takes no bool."""
        annotation = cls.model_fields[info.field_name].annotation
        choices = get_args(annotation)
        if isinstance(value, bool) and get_origin(annotation) is Literal and bool not in set(map(type, choices)):
            raise ValueError(f"expected one of {', '.join(map(str, choices))}")
        return value
