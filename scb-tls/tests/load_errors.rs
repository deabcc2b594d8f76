//! Validation at load: every error names the file at fault.

mod common;

use std::path::Path;
use std::time::{Duration, SystemTime};

use common::{Dates, KeyKind, Pki, new_key};
use scb_tls::{CertFiles, TlsAcceptor, TlsError, TlsSettings};

/// Loads `files` both ways (`check` and `new`), expecting the same error, whose message
/// names `path`.
fn load_error(files: CertFiles, path: &Path) -> TlsError {
    let settings = TlsSettings::new([files]);
    let checked = settings.check().unwrap_err();
    let error = TlsAcceptor::new(settings).unwrap_err();
    assert_eq!(checked.to_string(), error.to_string());
    let message = error.to_string();
    assert!(
        message.contains(&path.display().to_string()),
        "{message:?} does not name {}",
        path.display()
    );
    error
}

#[test]
fn no_certificate_configured_is_an_error() {
    assert!(matches!(
        TlsAcceptor::new(TlsSettings::new([])),
        Err(TlsError::NoCertificates)
    ));
}

#[test]
fn missing_certificate_file_names_its_path() {
    let pki = Pki::new();
    let mut files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    files.cert = pki.dir.join("missing.pem");
    let error = load_error(files.clone(), &files.cert);
    let TlsError::Read { source, .. } = error else {
        panic!("{error:?}");
    };
    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn missing_key_file_names_its_path() {
    let pki = Pki::new();
    let mut files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    files.key = pki.dir.join("missing.key");
    let error = load_error(files.clone(), &files.key);
    assert!(matches!(error, TlsError::Read { .. }), "{error:?}");
}

#[test]
fn unreadable_certificate_path_names_its_path() {
    let pki = Pki::new();
    let mut files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    files.cert = pki.dir.path().to_owned(); // a directory
    let error = load_error(files.clone(), &files.cert);
    assert!(matches!(error, TlsError::Read { .. }), "{error:?}");
}

#[test]
fn certificate_file_without_a_certificate_names_its_path() {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    // A key where the certificate should be: PEM, but no CERTIFICATE section.
    std::fs::copy(&files.key, &files.cert).unwrap();
    let error = load_error(files.clone(), &files.cert);
    assert!(matches!(error, TlsError::NoCertificate { .. }), "{error:?}");

    std::fs::write(&files.cert, "not PEM at all\n").unwrap();
    let error = load_error(files.clone(), &files.cert);
    assert!(matches!(error, TlsError::NoCertificate { .. }), "{error:?}");
}

#[test]
fn certificate_that_is_not_x509_names_its_path() {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    std::fs::write(
        &files.cert,
        common::pem("CERTIFICATE", b"\x30\x03\x02\x01\x01"),
    )
    .unwrap();
    let error = load_error(files.clone(), &files.cert);
    assert!(
        matches!(error, TlsError::BadCertificate { .. }),
        "{error:?}"
    );
}

#[test]
fn key_file_without_a_key_names_its_path() {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    std::fs::copy(&files.cert, &files.key).unwrap();
    let error = load_error(files.clone(), &files.key);
    assert!(matches!(error, TlsError::NoKey { .. }), "{error:?}");
}

#[test]
fn encrypted_key_is_reported_as_no_key() {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    std::fs::write(
        &files.key,
        common::pem("ENCRYPTED PRIVATE KEY", &[0x30, 0x00]),
    )
    .unwrap();
    let error = load_error(files.clone(), &files.key);
    assert!(matches!(error, TlsError::NoKey { .. }), "{error:?}");
    assert!(
        error
            .to_string()
            .contains("encrypted keys are not supported")
    );
}

#[test]
fn unparsable_key_names_its_path() {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    std::fs::write(
        &files.key,
        common::pem("PRIVATE KEY", b"\x30\x03\x02\x01\x00"),
    )
    .unwrap();
    let error = load_error(files.clone(), &files.key);
    assert!(
        matches!(error, TlsError::UnsupportedKey { .. }),
        "{error:?}"
    );
}

#[test]
fn broken_pem_names_its_path() {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    let key = std::fs::read_to_string(&files.key).unwrap();
    std::fs::write(&files.key, key.replace("-----END", "-----BROKEN")).unwrap();
    let error = load_error(files.clone(), &files.key);
    assert!(matches!(error, TlsError::Pem { .. }), "{error:?}");
}

#[test]
fn key_of_another_certificate_names_both_files() {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    let other = pki.leaf("b", &["b.test"], KeyKind::EcdsaP256Pkcs8);
    let mixed = CertFiles::new(&files.cert, &other.key);
    let error = load_error(mixed, &files.cert);
    assert!(
        error.to_string().contains(&other.key.display().to_string()),
        "{error}"
    );
    assert!(matches!(error, TlsError::KeyMismatch { .. }), "{error:?}");
}

#[test]
fn key_of_another_type_is_a_mismatch() {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    let key = new_key(KeyKind::Ed25519);
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    let error = load_error(files.clone(), &files.key);
    assert!(matches!(error, TlsError::KeyMismatch { .. }), "{error:?}");
}

#[test]
fn expired_certificate_names_its_path_and_date() {
    let pki = Pki::new();
    let files = pki.leaf_with("a", &["a.test"], KeyKind::EcdsaP256Pkcs8, Dates::Expired);
    let error = load_error(files.clone(), &files.cert);
    assert!(matches!(error, TlsError::Expired { .. }), "{error:?}");
    assert!(
        error.to_string().contains("2021-01-01 00:00:00 UTC"),
        "{error}"
    );
}

#[test]
fn not_yet_valid_certificate_names_its_path_and_date() {
    let pki = Pki::new();
    let files = pki.leaf_with(
        "a",
        &["a.test"],
        KeyKind::EcdsaP256Pkcs8,
        Dates::NotYetValid,
    );
    let error = load_error(files.clone(), &files.cert);
    assert!(matches!(error, TlsError::NotYetValid { .. }), "{error:?}");
    assert!(
        error.to_string().contains("2090-01-01 00:00:00 UTC"),
        "{error}"
    );
}

#[test]
fn the_first_bad_certificate_of_several_is_reported() {
    let pki = Pki::new();
    let good = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    let expired = pki.leaf_with("b", &["b.test"], KeyKind::EcdsaP256Pkcs8, Dates::Expired);
    let error = TlsAcceptor::new(TlsSettings::new([good]).cert(expired.clone())).unwrap_err();
    assert!(
        matches!(error, TlsError::Expired { ref path, .. } if *path == expired.cert),
        "{error:?}"
    );
}

#[test]
fn check_reports_names_and_dates() {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test", "*.A.test"], KeyKind::RsaPkcs1);
    // Certificate and key in one file work too.
    let combined = pki.dir.join("combined.pem");
    let both = std::fs::read_to_string(&files.cert).unwrap()
        + &std::fs::read_to_string(&files.key).unwrap();
    std::fs::write(&combined, both).unwrap();
    let infos = TlsSettings::new([CertFiles::new(&combined, &combined)])
        .check()
        .unwrap();
    assert_eq!(infos.len(), 1);
    assert_eq!(infos[0].cert, combined);
    assert_eq!(infos[0].names, ["a.test", "*.a.test"]);
    let now = SystemTime::now();
    assert!(infos[0].not_before < now && now < infos[0].not_after);
    // rcgen's default validity ends in 4096.
    assert!(infos[0].not_after > now + Duration::from_secs(1000 * 365 * 86_400));
}
