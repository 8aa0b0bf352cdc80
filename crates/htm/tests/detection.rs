//! RTM detection and backend selection on the machine running the tests.

use pmtx_htm::{rtm_support, Htm, HtmBackendKind, HtmConfig, HtmError, RtmSupport};

/// Whether the kernel lists the `rtm` CPU flag (Linux only; `None` elsewhere).
fn cpuinfo_lists_rtm() -> Option<bool> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    Some(
        cpuinfo
            .lines()
            .filter(|line| line.starts_with("flags"))
            .any(|line| line.split_whitespace().any(|flag| flag == "rtm")),
    )
}

#[test]
fn detection_returns_without_faulting_and_agrees_with_cpuinfo() {
    let support = rtm_support();
    // Running twice must give the same verdict (the probe is repeatable).
    assert_eq!(rtm_support(), support);
    if cpuinfo_lists_rtm() == Some(false) {
        assert_ne!(support, RtmSupport::Available, "RTM reported available although /proc/cpuinfo lacks the flag");
    }
    if !cfg!(target_arch = "x86_64") {
        assert_eq!(support, RtmSupport::NotX86);
    }
}

#[test]
fn requesting_rtm_fails_with_a_typed_error_where_it_is_unavailable() {
    let support = rtm_support();
    match Htm::new(HtmConfig::rtm()) {
        Ok(htm) => {
            assert!(support.is_available());
            assert_eq!(htm.backend(), HtmBackendKind::Rtm);
        }
        Err(error) => {
            assert_eq!(error, HtmError::RtmUnavailable(support));
            assert!(!support.is_available());
            let message = error.to_string();
            assert!(message.contains("rtm backend") && message.contains(&support.to_string()), "{message}");
        }
    }
}

#[test]
fn auto_picks_rtm_only_where_available() {
    let htm = Htm::new(HtmConfig::auto()).expect("auto never requests an unavailable backend");
    let expected = if rtm_support().is_available() { HtmBackendKind::Rtm } else { HtmBackendKind::None };
    assert_eq!(htm.backend(), expected);
}

#[test]
fn invalid_sim_rates_are_rejected() {
    let mut config = HtmConfig::sim(1, 0);
    config.sim.begin_abort_per_million = 600_000;
    config.sim.commit_abort_per_million = 600_000;
    let error = Htm::new(config).unwrap_err();
    assert!(matches!(error, HtmError::InvalidSimAbortRate { .. }), "{error}");
    assert!(Htm::new(HtmConfig::sim(1, 1_000_000)).is_ok());
}
