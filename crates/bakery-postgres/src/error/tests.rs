use super::support::*;
use super::*;

#[test]
fn sqlstates() {
    for (code, kind) in SQLSTATES {
        for op in OPS {
            for phase in PHASES {
                assert_eq!(
                    classify_db(code, "ERROR", phase, op),
                    kind,
                    "{code} {op} {phase}"
                );
            }
        }
    }
}

#[test]
fn fatal_while_a_write_executes_is_unknown() {
    for code in ["57P01", "57P02", "08006", "XX000"] {
        for op in [Operation::Put, Operation::Delete] {
            for severity in ["FATAL", "PANIC"] {
                let kind = classify_db(code, severity, Phase::Execute, op);
                assert_eq!(kind, ErrorKind::Unknown, "{code} {severity} {op}");
            }
            for phase in [Phase::Connect, Phase::Prepare] {
                let kind = classify_db(code, "FATAL", phase, op);
                assert_ne!(kind, ErrorKind::Unknown, "{code} {phase} {op}");
            }
        }
        assert_ne!(
            classify_db(code, "FATAL", Phase::Execute, Operation::Get),
            ErrorKind::Unknown
        );
    }
    assert_eq!(
        classify_db("57P01", "FATAL", Phase::Execute, Operation::Get),
        ErrorKind::Unavailable
    );
}

#[test]
fn lost_connections() {
    for driver in [Driver::Closed, Driver::Io] {
        for op in OPS {
            for phase in [Phase::Connect, Phase::Prepare] {
                assert_eq!(classify_driver(driver, phase, op), ErrorKind::Unavailable);
            }
        }
        for op in [Operation::Put, Operation::Delete] {
            assert_eq!(
                classify_driver(driver, Phase::Execute, op),
                ErrorKind::Unknown,
                "{op}"
            );
        }
        for op in [Operation::Get, Operation::Watch, Operation::Notify] {
            assert_eq!(
                classify_driver(driver, Phase::Execute, op),
                ErrorKind::Unavailable,
                "{op}"
            );
        }
    }
    for driver in [Driver::Connect, Driver::Timeout] {
        assert_eq!(
            classify_driver(driver, Phase::Connect, Operation::Put),
            ErrorKind::Unavailable
        );
    }
    for driver in [Driver::Tls, Driver::Auth, Driver::Config] {
        assert_eq!(
            classify_driver(driver, Phase::Connect, Operation::Open),
            ErrorKind::Config
        );
    }
    let cases = [
        (Driver::Protocol, Operation::Put, ErrorKind::Unknown),
        (Driver::Protocol, Operation::Get, ErrorKind::Internal),
        (Driver::Other, Operation::Put, ErrorKind::Internal),
    ];
    for (driver, op, kind) in cases {
        let found = classify_driver(driver, Phase::Execute, op);
        assert_eq!(found, kind, "{driver:?} {op}");
    }
}

#[test]
fn client_timeouts() {
    let cases = [
        (Phase::Execute, Operation::Put, ErrorKind::Unknown),
        (Phase::Execute, Operation::Delete, ErrorKind::Unknown),
        (Phase::Execute, Operation::Get, ErrorKind::Unavailable),
        (Phase::Connect, Operation::Put, ErrorKind::Unavailable),
        (Phase::Prepare, Operation::Put, ErrorKind::Unavailable),
    ];
    for (phase, op, kind) in cases {
        let err = timed_out(phase, op, Duration::from_secs(1));
        assert_eq!(err.kind(), kind, "{op} {phase}");
    }
    let err = timed_out(Phase::Execute, Operation::Put, Duration::from_millis(1500));
    assert_eq!(err.backend(), "postgres");
    assert!(err.message().contains("may or may not"), "{err}");
}

#[test]
fn driver_errors_that_can_be_built_here() {
    let e = "postgres://u@h/db?port=x"
        .parse::<tokio_postgres::Config>()
        .unwrap_err();
    let err = map_err(e, Phase::Connect, Operation::Open);
    assert_eq!(err.kind(), ErrorKind::Config);
    assert_eq!(err.backend(), "postgres");
    assert!(err.message().contains("port"), "{err}");
    assert!(StdError::source(&err).is_some());
}
