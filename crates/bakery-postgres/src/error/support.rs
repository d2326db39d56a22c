//! What the error mapper's tests share.

use super::*;

/// Every call and every phase, for the tests.
pub(super) const OPS: [Operation; 6] = [
    Operation::Open,
    Operation::Get,
    Operation::Put,
    Operation::Delete,
    Operation::Watch,
    Operation::Notify,
];
pub(super) const PHASES: [Phase; 3] = [Phase::Connect, Phase::Prepare, Phase::Execute];

/// Every ERROR-severity SQLSTATE the mapper tells apart, with its kind:
/// classified alike by the unit tests and, produced on the real server, by
/// `server_tests`.
pub(super) const SQLSTATES: [(&str, ErrorKind); 33] = [
    ("28P01", ErrorKind::Config),
    ("28000", ErrorKind::Config),
    ("3D000", ErrorKind::Config),
    ("3F000", ErrorKind::Config),
    ("0A000", ErrorKind::Config),
    ("42P01", ErrorKind::Config),
    ("42501", ErrorKind::Config),
    ("42703", ErrorKind::Config),
    ("08006", ErrorKind::Unavailable),
    ("08001", ErrorKind::Unavailable),
    ("57P01", ErrorKind::Unavailable),
    ("57P02", ErrorKind::Unavailable),
    ("57P03", ErrorKind::Unavailable),
    ("57014", ErrorKind::Unavailable),
    ("53300", ErrorKind::Unavailable),
    ("40001", ErrorKind::Unavailable),
    ("40P01", ErrorKind::Unavailable),
    ("25006", ErrorKind::Unavailable),
    ("55P03", ErrorKind::Unavailable),
    ("55006", ErrorKind::Unavailable),
    ("58P01", ErrorKind::Unavailable),
    ("22003", ErrorKind::Exhausted),
    ("22001", ErrorKind::InvalidInput),
    ("22021", ErrorKind::InvalidInput),
    ("22P05", ErrorKind::InvalidInput),
    ("22P02", ErrorKind::Corrupt),
    ("22012", ErrorKind::Corrupt),
    ("23502", ErrorKind::Corrupt),
    ("23514", ErrorKind::Corrupt),
    ("XX001", ErrorKind::Corrupt),
    ("XX002", ErrorKind::Corrupt),
    ("XX000", ErrorKind::Internal),
    ("23505", ErrorKind::Internal),
];

/// `e` as every call would see it: `sent_write` for a write whose
/// statement was sent, `otherwise` for all other calls and phases.
pub(super) fn assert_everywhere(
    e: &tokio_postgres::Error,
    sent_write: ErrorKind,
    otherwise: ErrorKind,
    what: &str,
) {
    for op in OPS {
        for phase in PHASES {
            let expected = if phase == Phase::Execute && op.writes() {
                sent_write
            } else {
                otherwise
            };
            assert_eq!(
                classify(e, phase, op),
                expected,
                "{what}: {op} {phase}: {e:?}"
            );
        }
    }
}
