//! User and group names to ids, for the owner of a Unix socket file.
//!
//! From `/etc/passwd` and `/etc/group`, as `chown` without NSS would: names that only a
//! directory service (LDAP, systemd-homed) knows are not found, and a numeric id is
//! always taken as it is. Read at config load, not per request.

use std::path::Path;

/// The user id of `name` (or `name` itself when it is a number).
pub(crate) fn uid(name: &str) -> Result<u32, String> {
    id(name, Path::new("/etc/passwd"), "user")
}

/// The group id of `name` (or `name` itself when it is a number).
pub(crate) fn gid(name: &str) -> Result<u32, String> {
    id(name, Path::new("/etc/group"), "group")
}

fn id(name: &str, file: &Path, what: &str) -> Result<u32, String> {
    if let Ok(id) = name.parse() {
        return Ok(id);
    }
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    lookup(&text, name).ok_or_else(|| format!("no {what} {name:?} in {}", file.display()))
}

/// The third field of the `name:` line of a passwd or group file.
fn lookup(text: &str, name: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next() == Some(name))
            .then(|| fields.nth(1)?.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_become_ids() {
        let passwd =
            "root:x:0:0:root:/root:/bin/bash\nwww-data:x:33:33::/var/www:/usr/sbin/nologin\n";
        assert_eq!(lookup(passwd, "www-data"), Some(33));
        assert_eq!(lookup(passwd, "root"), Some(0));
        assert_eq!(lookup(passwd, "www"), None);
        assert_eq!(uid("1234"), Ok(1234));
        assert_eq!(uid("root"), Ok(0));
        assert_eq!(gid("root"), Ok(0));
        assert!(uid("no-such-user-here").unwrap_err().contains("no user"));
    }
}
