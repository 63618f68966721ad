"""Building blocks shared by the config models: the strict base model, custom errors, lengths.

Every model is strict (YAML/JSON types only: no "5" for 5, no true for 1), frozen, and forbids
unknown keys. A key given as `null` means "not set" (Determined's rule), so it takes the default.

Validators never raise `ValueError`: they raise `PydanticCustomError` of type `stratus` whose
`message` is already the phrase the user sees (`load.py` passes it through unchanged), or of type
`stratus_type`, to which `load.py` appends `, got <the input>`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_serializer, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

__all__ = [
    "Length",
    "LengthUnit",
    "PositiveLength",
    "StrictModel",
    "custom_error",
    "raise_problems",
    "type_error",
]

LengthUnit = Literal["batches", "records", "epochs"]
LENGTH_UNITS: tuple[LengthUnit, ...] = ("batches", "records", "epochs")


def custom_error(message: str) -> PydanticCustomError:
    """An error whose message is shown to the user as is."""
    return PydanticCustomError("stratus", "{message}", {"message": message})


def type_error(message: str) -> PydanticCustomError:
    """An error about the input's type; the user sees `<message>, got <input>`."""
    return PydanticCustomError("stratus_type", "{message}", {"message": message})


def raise_problems(title: str, problems: Iterable[tuple[tuple[str | int, ...], str, Any]]) -> None:
    """Raise one ValidationError carrying several problems, each `(loc, message, input)`.

    `loc` is relative to the model being validated. Does nothing when `problems` is empty.
    """
    details: list[InitErrorDetails] = [
        {"type": custom_error(message), "loc": loc, "input": value} for loc, message, value in problems
    ]
    if details:
        raise ValidationError.from_exception_data(title, details)


class StrictModel(BaseModel):
    """Base of every config section: strict types, frozen, unknown keys are errors, null = unset."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    # Fields Stratus accepts for compatibility but does not act on: field name -> why.
    # Parsing warns when such a field is given a value other than its default.
    ignored_fields: ClassVar[Mapping[str, str]] = {}
    # Whether a key given as null is dropped (and so takes its default) before validation.
    drop_nulls: ClassVar[bool] = True

    @model_validator(mode="before")
    @classmethod
    def _null_means_unset(cls, data: Any) -> Any:
        if cls.drop_nulls and isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


class Length(StrictModel):
    """A training length, Determined style: `{batches: N}`, `{records: N}` or `{epochs: N}`.

    A bare integer means batches. Serialized as the one-key mapping.
    """

    batches: int | None = Field(default=None, ge=0)
    records: int | None = Field(default=None, ge=0)
    epochs: int | None = Field(default=None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _bare_int_is_batches(cls, data: Any) -> Any:
        if isinstance(data, int) and not isinstance(data, bool):
            return {"batches": data}
        if isinstance(data, dict | Length):
            return data
        raise type_error("must be a number of batches, or one of {batches: N}, {records: N}, {epochs: N}")

    @model_validator(mode="after")
    def _exactly_one_unit(self) -> Length:
        given = [unit for unit in LENGTH_UNITS if getattr(self, unit) is not None]
        if len(given) != 1:
            raise custom_error("must set exactly one of batches, records or epochs")
        return self

    @model_serializer(mode="plain")
    def _as_one_key(self) -> dict[str, int]:
        return {self.unit: self.value}

    def __eq__(self, other: object) -> bool:
        # A length is a value: {epochs: 2} equals {epochs: 2} whichever Length class holds it.
        if isinstance(other, Length):
            return (self.unit, self.value) == (other.unit, other.value)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.unit, self.value))

    @property
    def unit(self) -> LengthUnit:
        for unit in LENGTH_UNITS:
            if getattr(self, unit) is not None:
                return unit
        raise AssertionError("a validated Length has a unit")  # pragma: no cover

    @property
    def value(self) -> int:
        value = getattr(self, self.unit)
        assert isinstance(value, int)
        return value

    def to_batches(self, *, records_per_epoch: int | None, global_batch_size: int | None) -> int | None:
        """This length in batches, or None when the conversion needs a number we don't have.

        records -> records // global_batch_size; epochs -> epochs * records_per_epoch //
        global_batch_size (Determined's rules, rounding down).
        """
        if self.unit == "batches":
            return self.value
        if not global_batch_size or global_batch_size <= 0:
            return None
        if self.unit == "records":
            return self.value // global_batch_size
        if not records_per_epoch or records_per_epoch <= 0:
            return None
        return self.value * records_per_epoch // global_batch_size

    @classmethod
    def of(cls, unit: LengthUnit, value: int) -> Length:
        return cls.model_validate({unit: value})


class PositiveLength(Length):
    """A length that must be at least 1 (a searcher's `max_length`)."""

    batches: int | None = Field(default=None, ge=1)
    records: int | None = Field(default=None, ge=1)
    epochs: int | None = Field(default=None, ge=1)
