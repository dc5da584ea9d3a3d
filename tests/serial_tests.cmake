# Tests whose outcome rests on measured speed (an auto codec's choice, a shaped link's
# rate) run alone: under ctest -j, other tests on the same 2 cores would make a loopback
# probe or a codec's timing look slower than the machine is. Included by ctest after the
# discovered test lists (TEST_INCLUDE_FILES), so the names exist here.
foreach(name
        DdpE2eTest.CompressGradAutoKeepsTheExactAllReduceOnLoopback
        PipelineE2eTest.CompressAutoKeepsNoneOnLoopbackAndSaysWhy
        NetlabTest.MeasuredBandwidthIsTheSetRate
        NetlabTest.CompressAutoFollowsARateChangeAtTheNextEpoch
        NetlabTest.CompressGradAutoCompressesOnASlowLink
        NetlabTest.TheProbeReadsAFastLinkWithoutOverreading
        NetlabTest.TheProbeReadsTheRateAndTheDelayOfShortAndLongLinks
        NetlabTest.DelayShowsInTheLatencyAndLossLeavesTheResultAlone)
  set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
endforeach()
