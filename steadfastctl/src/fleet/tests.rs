use super::inventory::{InventoryError, Target, parse_inventory, tls_host};
use super::*;

fn parse(text: &str) -> Result<Vec<Entry>, InventoryError> {
    parse_inventory(text, Path::new("inv.toml"), Path::new("/base"))
}

fn problem(text: &str) -> String {
    parse(text).expect_err("refused").to_string()
}

#[test]
fn every_transport_parses_and_relative_paths_are_the_files() {
    let entries = parse(
        r#"
        [[daemon]]
        name = "a"
        data_dir = "a-data"
        [[daemon]]
        name = "b"
        socket = "/run/b.sock"
        [[daemon]]
        name = "c"
        tcp = "127.0.0.1:7000"
        token_file = "c.token"
        [[daemon]]
        name = "d"
        tls = "d.example:7443"
        ca = "ca.pem"
        cert = "me.pem"
        key = "me.key"
        "#,
    )
    .expect("parses");
    assert_eq!(entries.len(), 4);
    assert_eq!(entries[0].target, Target::DataDir("/base/a-data".into()));
    assert_eq!(entries[1].target, Target::Socket("/run/b.sock".into()));
    assert_eq!(
        entries[2].target,
        Target::Tcp {
            addr: "127.0.0.1:7000".parse().expect("addr"),
            token_file: "/base/c.token".into()
        }
    );
    assert!(matches!(&entries[3].target, Target::Tls { addr, .. } if addr == "d.example:7443"));
    assert_eq!(tls_host("d.example:7443"), "d.example");
    assert_eq!(tls_host("[::1]:7443"), "::1");
    assert_eq!(tls_host("127.0.0.1:7443"), "127.0.0.1");
}

#[test]
fn a_bad_entry_is_named_with_its_problem() {
    for (text, needles) in [
        (
            "[[daemon]]\nname = \"a\"\ndata_dir = \"/a\"\nsockt = \"/x\"\n",
            &["daemon #1 (\"a\")", "unknown key `sockt`"][..],
        ),
        (
            "[[daemon]]\nname = \"a\"\n",
            &["daemon #1 (\"a\")", "no transport"][..],
        ),
        (
            "[[daemon]]\nname = \"a\"\ndata_dir = \"/a\"\ntcp = \"127.0.0.1:1\"\n",
            &["2 transports", "`data_dir`, `tcp`"][..],
        ),
        (
            "[[daemon]]\nname = \"a\"\ndata_dir = \"/a\"\n[[daemon]]\nname = \"a\"\nsocket = \"/s\"\n",
            &["daemons #1 and #2 are both named \"a\""][..],
        ),
        (
            "[[daemon]]\nname = \"x\"\ntcp = \"localhost:1\"\ntoken_file = \"t\"\n",
            &["daemon #1 (\"x\")", "not an IP:PORT"][..],
        ),
        (
            "[[daemon]]\nname = \"x\"\ntcp = \"127.0.0.1:1\"\n",
            &["needs `token_file`"][..],
        ),
        (
            "[[daemon]]\nname = \"x\"\ndata_dir = \"/a\"\nca = \"ca.pem\"\n",
            &["`ca` goes only with `tls`"][..],
        ),
        (
            "[[daemon]]\nname = \"x\"\ntls = \"h:1\"\ncert = \"c\"\nkey = \"k\"\n",
            &["needs `ca`"][..],
        ),
        (
            "[[daemon]]\nname = \"x\"\ntls = \"h:1\"\nca = \"c\"\ncert = \"c\"\n",
            &["`cert` needs `key`"][..],
        ),
        (
            "[[daemon]]\nname = \"x\"\ntls = \"h\"\nca = \"c\"\ncert = \"c\"\nkey = \"k\"\n",
            &["not a HOST:PORT"][..],
        ),
        (
            "[[daemon]]\ndata_dir = \"/a\"\n",
            &["daemon #1 (no name)", "no `name`"][..],
        ),
        (
            "[[daemon]]\nname = \"a b\"\ndata_dir = \"/a\"\n",
            &["whitespace or a comma"][..],
        ),
        (
            "[[daemon]]\nname = \"a\"\ndata_dir = 3\n",
            &["`data_dir` must be a string (found: integer)"][..],
        ),
        ("", &["lists no daemon"][..]),
        ("daemons = []\n", &["unknown top-level key `daemons`"][..]),
        ("[[daemon]\n", &["is not TOML"][..]),
    ] {
        let problem = problem(text);
        for needle in needles {
            assert!(
                problem.contains(needle),
                "{needle:?} not in {problem:?} for {text:?}"
            );
        }
    }
}
