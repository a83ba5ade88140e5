//! The configuration reference and the config's types cannot drift apart (issue 40): docs/CONFIG.md has one
//! row per field of `config::schema`, table by table, and no other; the schema names exactly the fields of
//! the raw structs the file is read into (`src/config/validate.rs`, `store.rs`, `prices.rs`). A field added
//! without its row, or a row without its field, fails here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

use std::collections::BTreeSet;
use std::path::Path;

use tollgate::config::schema::TABLES;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The fields each `## <table>` section of docs/CONFIG.md has rows for.
fn documented() -> Vec<(String, BTreeSet<String>, Vec<String>)> {
    let text = std::fs::read_to_string(root().join("docs/CONFIG.md")).unwrap();
    let mut out: Vec<(String, BTreeSet<String>, Vec<String>)> = Vec::new();
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            out.push((h.trim().to_string(), BTreeSet::new(), Vec::new()));
            continue;
        }
        let Some((_, fields, effects)) = out.last_mut() else {
            continue;
        };
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 6 || !cells[1].starts_with('`') {
            continue;
        }
        let name = cells[1].trim_matches('`').to_string();
        assert!(
            fields.insert(name.clone()),
            "docs/CONFIG.md names `{name}` twice in one table"
        );
        effects.push(format!("{name}: {}", cells[4]));
    }
    out
}

#[test]
fn every_config_field_has_its_row_in_the_reference_and_every_row_a_field() {
    let docs = documented();
    for (table, fields) in TABLES {
        let want: BTreeSet<String> = fields.iter().map(|f| f.name.to_string()).collect();
        let (_, got, effects) = docs
            .iter()
            .find(|(h, _, _)| h == table)
            .unwrap_or_else(|| panic!("docs/CONFIG.md has no section `## {table}`"));
        let missing: Vec<&String> = want.difference(got).collect();
        let extra: Vec<&String> = got.difference(&want).collect();
        assert!(
            missing.is_empty(),
            "{table}: fields without a row in docs/CONFIG.md: {missing:?}"
        );
        assert!(
            extra.is_empty(),
            "{table}: rows in docs/CONFIG.md for no field: {extra:?}"
        );
        for e in effects {
            let said = e.split_once(": ").unwrap().1;
            assert!(
                said == "restart" || said == "restart, or the console at once",
                "{table}: `{e}`: the `Takes effect` column says `restart` or `restart, or the console at once`"
            );
        }
    }
}

/// The fields of `struct NAME` in a source file (`name: Type,` lines, attributes and comments skipped).
fn struct_fields(file: &str, name: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let start = text
        .find(&format!("struct {name} {{"))
        .unwrap_or_else(|| panic!("no struct {name} in {file}"));
    let body = &text[start..start + text[start..].find("\n}").unwrap()];
    body.lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && !l.starts_with('#'))
        .filter_map(|l| {
            l.split_once(':')
                .map(|(n, _)| n.trim_start_matches("pub ").trim().to_string())
        })
        .filter(|n| !n.is_empty() && !n.contains(' '))
        .collect()
}

#[test]
fn the_schema_names_exactly_the_fields_the_file_is_read_into() {
    let structs = [
        ("top level", "src/config/validate.rs", "RawConfig"),
        ("[[upstreams]]", "src/config/validate.rs", "RawUpstream"),
        ("[[models]]", "src/config/validate.rs", "RawModel"),
        ("[[models.tiers]]", "src/config/prices.rs", "RawTier"),
        ("[[groups]]", "src/config/validate.rs", "RawGroup"),
        ("[discovery]", "src/config/validate.rs", "RawDiscovery"),
        ("[store]", "src/config/store.rs", "RawStore"),
    ];
    for (table, file, name) in structs {
        let fields = TABLES.iter().find(|(t, _)| *t == table).unwrap().1;
        let schema: BTreeSet<String> = fields.iter().map(|f| f.name.to_string()).collect();
        assert_eq!(
            schema,
            struct_fields(file, name),
            "{table}: schema.rs and {name} ({file})"
        );
    }
}
