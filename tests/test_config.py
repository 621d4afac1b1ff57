import pytest

from busched.actions import ACTIONS
from busched.framework.config import DEFAULT_CONFIG, ConfigError, load_config
from busched.plugins import PLUGINS


def load(text):
    return load_config(text, known_actions=ACTIONS, known_plugins=PLUGINS)


def test_default_config_loads():
    c = load(DEFAULT_CONFIG)
    assert c.actions == ("enqueue", "allocate", "backfill")
    assert [p.name for p in c.tiers[0].plugins] == ["priority", "gang", "conformance"]
    gang = c.tiers[0].plugins[1]
    assert not gang.enabled("preemptable") and gang.enabled("job_ready")  # absent switch = enabled


def test_arguments_and_configurations():
    c = load('actions: "allocate"\ntiers:\n- plugins:\n  - name: binpack\n    arguments: {binpack.weight: 10}\n'
             "configurations:\n- name: allocate\n  arguments: {predicateErrorCacheEnable: false}\n")
    assert c.tiers[0].plugins[0].arguments == {"binpack.weight": 10}
    assert c.action_arguments("allocate") == {"predicateErrorCacheEnable": False}


@pytest.mark.parametrize("text,field", [
    ('actions: "allocate, teleport"', "config.actions"),
    ('actions: allocate\ntiers:\n- plugins:\n  - name: nosuch', r"config.tiers\[0\].plugins\[0\].name"),
    ('actions: allocate\ntiers:\n- plugins:\n  - name: gang\n    enableJobReady: "yes"',
     r"config.tiers\[0\].plugins\[0\].enableJobReady"),
    ('actions: allocate\ntiers:\n- plugins:\n  - name: gang\n    enableJobReadyy: true',
     r"config.tiers\[0\].plugins\[0\].enableJobReadyy"),
    ("actions: [allocate]", "config.actions"),
    ("tiers: {}", "config.tiers"),
    ("actions: allocate\nconfigurations:\n- arguments: {}", r"config.configurations\[0\].name"),
    ("bogus: 1", "config.bogus"),
    ("actions: [unclosed", "config"),
])
def test_errors_name_the_field(text, field):
    with pytest.raises(ConfigError, match=field):
        load(text)
