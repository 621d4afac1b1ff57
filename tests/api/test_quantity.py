from fractions import Fraction

import pytest

from busched.api.quantity import QuantityError, milli_value, parse_quantity, value


@pytest.mark.parametrize("raw,want", [
    ("500m", Fraction(1, 2)), ("1", 1), ("1.5", Fraction(3, 2)), ("3k", 3000), ("1Ki", 1024),
    ("1Gi", 2**30), ("1G", 10**9), ("4G", 4 * 10**9), ("1e3", 1000), ("1E-3", Fraction(1, 1000)),
    ("100n", Fraction(1, 10**7)), ("2u", Fraction(2, 10**6)), (".5", Fraction(1, 2)), ("-1", -1),
    ("+2M", 2 * 10**6), (3, 3), (0.1, Fraction(1, 10)), ("1Ei", 2**60), ("1.25Mi", Fraction(5, 4) * 2**20),
])
def test_parse_exact(raw, want):
    assert parse_quantity(raw) == want


def test_4G_fits_in_4Gi():  # noqa: N802 - the units are case-sensitive: 4G is not 4Gi
    assert value("4G") < value("4Gi")


def test_value_and_milli_round_up():
    assert value("1.5") == 2
    assert value("100m") == 1
    assert milli_value("1.5") == 1500
    assert milli_value("0.0001") == 1
    assert milli_value("1n") == 1
    assert value("1Gi") == 1073741824


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "1Q", "Gi", "1 Gi", "1gi", True, None, float("inf")])
def test_bad_quantities_raise(bad):
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_go_durations():
    from busched.api.duration import DurationError, parse_duration

    assert parse_duration("3m") == 180
    assert abs(parse_duration("1h2m3s4ms5us6ns") - 3723.004005006) < 1e-9
    assert parse_duration("1.5h") == 5400
    for bad in ("", "3", "3x", "m3"):
        with pytest.raises(DurationError):
            parse_duration(bad)


def test_binary_units_shows_bytes_as_people_write_them():
    from busched.api.quantity import binary_units

    assert binary_units("4294967296") == "4Gi"
    assert binary_units("1610612736") == "1.5Gi"
    assert binary_units("512") == "512"
    assert binary_units("8Gi") == "8Gi"  # a quantity as written stays as it is
