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


# -- node search (vc-scheduler's --minimum-feasible-nodes and friends) ------------------------------
def test_node_search_defaults_are_volcanos():
    s = load(DEFAULT_CONFIG).node_search
    assert (s.min_nodes_to_find, s.min_percentage_of_nodes_to_find, s.percentage_of_nodes_to_find) == (100, 5, 0)


def test_node_search_is_read():
    c = load('actions: "allocate"\nnodeSearch: {minimumFeasibleNodes: 7, minimumPercentageNodesToFind: 2,'
             ' percentageNodesToFind: 100}\n')
    assert (c.node_search.min_nodes_to_find, c.node_search.min_percentage_of_nodes_to_find,
            c.node_search.percentage_of_nodes_to_find) == (7, 2, 100)


@pytest.mark.parametrize("body,field", [
    ("{nodesToFind: 3}", "config.nodeSearch.nodesToFind: unknown field"),
    ("{percentageNodesToFind: 101}", "config.nodeSearch.percentageNodesToFind: a percentage"),
    ("{minimumPercentageNodesToFind: -1}", "config.nodeSearch.minimumPercentageNodesToFind: must be at least 0"),
    ("{minimumFeasibleNodes: 0}", "config.nodeSearch.minimumFeasibleNodes: must be at least 1"),
    ("{minimumFeasibleNodes: true}", "config.nodeSearch.minimumFeasibleNodes: expected a whole number"),
    ("{minimumFeasibleNodes: 2.5}", "config.nodeSearch.minimumFeasibleNodes: expected a whole number"),
    ("[1]", "config.nodeSearch: expected a mapping"),
])
def test_node_search_errors_name_the_field(body, field):
    with pytest.raises(ConfigError) as e:
        load(f'actions: "allocate"\nnodeSearch: {body}\n')
    assert field in str(e.value)


@pytest.mark.parametrize("search,want", [
    ("", 144),  # 300 nodes: 50 - 300 // 125 = 48% of them
    ("nodeSearch: {percentageNodesToFind: 100}\n", 300),  # exhaustive
    ("nodeSearch: {percentageNodesToFind: 10}\n", 100),  # 30, raised to the minimum of 100
    ("nodeSearch: {percentageNodesToFind: 10, minimumFeasibleNodes: 20}\n", 30),
    ("nodeSearch: {minimumFeasibleNodes: 400}\n", 300),  # no more nodes than that: all of them
])
def test_node_search_bounds_the_feasible_nodes_a_task_gets(search, want):
    from busched.bench import cluster as cl
    from busched.builtin import open_session
    from busched.framework.nodeselect import PredicateHelper

    job, tasks = cl.gang_job("one", 1)
    cache = cl.new_cache(cl.nodes(300), arriving=([job], tasks))
    ssn = open_session(cache.snapshot(), load(DEFAULT_CONFIG + search))
    task = next(iter(ssn.jobs[f"{cl.NAMESPACE}/one"].tasks.values()))
    found, _ = PredicateHelper(ssn).predicate_nodes(task, ssn.node_list, ssn.predicate_for_allocate,
                                                   resource_fit=task.init_resreq)
    assert len(found) == want
