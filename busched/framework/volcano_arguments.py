"""The argument names Volcano's own plugins and actions read (volcano-sh/volcano, pkg/scheduler).

The configuration check (busched.framework.argcheck) needs them to tell two kinds of argument
we do not read apart: one that is Volcano's (a feature we do not implement: the configuration is
refused, since it would not do here what it does there) from one nobody reads (Volcano ignores
it; we warn).  Taken from each plugin's and action's Go source (the keys its ``GetBool``,
``GetInt``..., ``framework.Get`` and ``arguments[...]`` read); a name ending in ``*`` is a family
(``binpack.resources.<resource>``).  A plugin or action absent here reads no arguments in Volcano.
"""

from __future__ import annotations

__all__ = ["VOLCANO_PLUGIN_ARGUMENTS", "VOLCANO_ACTION_ARGUMENTS"]

_PREDICATE_ERROR_CACHE = "predicateErrorCacheEnable"  # pkg/scheduler/conf: conf.EnablePredicateErrCacheKey

VOLCANO_PLUGIN_ARGUMENTS: dict[str, frozenset[str]] = {
    "binpack": frozenset({"binpack.weight", "binpack.cpu", "binpack.memory", "binpack.resources",
                          "binpack.resources.*"}),
    "capacity": frozenset({"ancestorReclaimLevel", "capacity.DynamicResourceAllocationEnable",
                           "capacity.DRAConsumableCapacityEnable"}),
    "deviceshare": frozenset({"deviceshare.GPUSharingEnable", "deviceshare.NodeLockEnable",
                              "deviceshare.GPUNumberEnable", "deviceshare.VGPUEnable",
                              "deviceshare.AscendMindClusterVNPUEnable", "deviceshare.AscendHAMiVNPUEnable",
                              "deviceshare.SchedulePolicy", "deviceshare.ScheduleWeight",
                              "deviceshare.KnownGeometriesCMName", "deviceshare.KnownGeometriesCMNamespace",
                              "deviceshare.GPUExclusiveRules"}),
    "extender": frozenset({"extender.urlPrefix", "extender.httpTimeout", "extender.onSessionOpenVerb",
                           "extender.onSessionCloseVerb", "extender.predicateVerb", "extender.prioritizeVerb",
                           "extender.preemptableVerb", "extender.reclaimableVerb", "extender.queueOverusedVerb",
                           "extender.jobEnqueueableVerb", "extender.jobEnqueuedVerb", "extender.jobReadyVerb",
                           "extender.allocateFuncVerb", "extender.deallocateFuncVerb", "extender.ignorable",
                           "extender.managedResources"}),
    "network-topology-aware": frozenset({"weight", "hypernode.binpack.cpu", "hypernode.binpack.memory",
                                         "hypernode.binpack.resources", "hypernode.binpack.resources.*",
                                         "hypernode.binpack.normal-pod.enable",
                                         "hypernode.binpack.normal-pod.fading",
                                         "hypernode.gradient.evict.max-hypernodes"}),
    "nodegroup": frozenset({"strict", "enablePreferredOrder"}),
    "nodeorder": frozenset({"nodeaffinity.weight", "podaffinity.weight", "leastrequested.weight",
                            "balancedresource.weight", "mostrequested.weight", "tainttoleration.weight",
                            "imagelocality.weight", "podtopologyspread.weight"}),
    "numa-aware": frozenset({"weight"}),
    "overcommit": frozenset({"overcommit-factor"}),
    "predicates": frozenset({"predicate.NodeAffinityEnable", "predicate.NodePortsEnable",
                             "predicate.TaintTolerationEnable", "predicate.PodAffinityEnable",
                             "predicate.NodeVolumeLimitsEnable", "predicate.VolumeZoneEnable",
                             "predicate.PodTopologySpreadEnable", "predicate.VolumeBindingEnable",
                             "predicate.DynamicResourceAllocationEnable", "predicate.CacheEnable",
                             "volumebinding.bindTimeoutSeconds", "volumebinding.shape", "volumebinding.weight",
                             "dynamicresources.filterTimeoutSeconds"}),
    "rescheduling": frozenset({"interval", "metricsPeriod", "strategies"}),
    "resource-strategy-fit": frozenset({"resourceStrategyFitWeight", "resources", "proportional", "sra"}),
    "sla": frozenset({"sla-waiting-time"}),
    "task-topology": frozenset({"task-topology.weight"}),
    "tdm": frozenset({"tdm.evict.period", "tdm.revocable-zone.*"}),
    "usage": frozenset({"usage.weight", "cpu.weight", "memory.weight", "thresholds", "estimator"}),
}

VOLCANO_ACTION_ARGUMENTS: dict[str, frozenset[str]] = {
    "allocate": frozenset({_PREDICATE_ERROR_CACHE}),
    "backfill": frozenset({_PREDICATE_ERROR_CACHE}),
    "reclaim": frozenset({_PREDICATE_ERROR_CACHE}),
    "preempt": frozenset({_PREDICATE_ERROR_CACHE, "enableTopologyAwarePreemption", "topologyAwarePreemptWorkerNum",
                          "minCandidateNodesPercentage", "minCandidateNodesAbsolute", "maxCandidateNodesAbsolute"}),
    "gangpreempt": frozenset({"maxDomains", "allowWholeBundle"}),
    "gangreclaim": frozenset({"maxDomains", "allowWholeBundle"}),
}
