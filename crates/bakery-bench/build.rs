//! `cfg(server_backend)`: set when a backend that needs a server (and has
//! native peers) is compiled in — the one list of them, for the code that
//! is only used then.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(server_backend)");
    let servers = [
        "POSTGRES",
        "REDIS",
        "ETCD",
        "CASSANDRA",
        "MONGODB",
        "MYSQL",
        "DYNAMODB",
    ];
    for feature in servers {
        println!("cargo::rerun-if-env-changed=CARGO_FEATURE_{feature}");
    }
    if servers
        .iter()
        .any(|feature| std::env::var_os(format!("CARGO_FEATURE_{feature}")).is_some())
    {
        println!("cargo::rustc-cfg=server_backend");
    }
}
