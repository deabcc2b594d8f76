//! CPU lists in `taskset -c` syntax (`0`, `0-3`, `4-5,8`).

use std::collections::BTreeSet;

use anyhow::{Context as _, bail};

/// A parsed CPU list: the text as given (passed to `taskset -c` unchanged) and its CPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CpuSet {
    text: String,
    cpus: BTreeSet<usize>,
}

impl CpuSet {
    /// Parses a list such as `0-3,6`.
    ///
    /// # Errors
    ///
    /// On an empty list, a malformed number or range, or a range that runs backwards.
    pub(crate) fn parse(text: &str) -> anyhow::Result<CpuSet> {
        let mut cpus = BTreeSet::new();
        for part in text.split(',') {
            let part = part.trim();
            let (lo, hi) = match part.split_once('-') {
                Some((lo, hi)) => (lo, hi),
                None => (part, part),
            };
            let num = |s: &str| -> anyhow::Result<usize> {
                s.trim()
                    .parse()
                    .with_context(|| format!("CPU list {text:?}: {part:?} is not a CPU or a range"))
            };
            let (lo, hi) = (num(lo)?, num(hi)?);
            if lo > hi {
                bail!("CPU list {text:?}: range {part:?} runs backwards");
            }
            cpus.extend(lo..=hi);
        }
        Ok(CpuSet {
            text: text.trim().to_owned(),
            cpus,
        })
    }

    /// The list as given, for `taskset -c` and reports.
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    /// How many CPUs the list names.
    pub(crate) fn count(&self) -> usize {
        self.cpus.len()
    }

    /// Whether the two lists share a CPU.
    pub(crate) fn overlaps(&self, other: &CpuSet) -> bool {
        !self.cpus.is_disjoint(&other.cpus)
    }

    /// Whether every CPU of this list is in `other`.
    pub(crate) fn is_subset(&self, other: &CpuSet) -> bool {
        self.cpus.is_subset(&other.cpus)
    }

    /// The CPUs online now (`/sys/devices/system/cpu/online`).
    ///
    /// # Errors
    ///
    /// When the file cannot be read or parsed.
    pub(crate) fn online() -> anyhow::Result<CpuSet> {
        let text = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .context("reading /sys/devices/system/cpu/online")?;
        CpuSet::parse(text.trim())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_cpus_and_ranges_are_counted_once() {
        let set = CpuSet::parse("0-3,2,6").unwrap();
        assert_eq!(set.count(), 5);
        assert!(CpuSet::parse("2,6").unwrap().is_subset(&set));
        assert!(!CpuSet::parse("7").unwrap().is_subset(&set));
        assert_eq!(set.as_str(), "0-3,2,6");
    }

    #[test]
    fn malformed_lists_are_errors() {
        for bad in ["", "a", "3-1", "1-", "1,,2"] {
            assert!(CpuSet::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn this_machine_has_cpu_0_online() {
        assert!(
            CpuSet::parse("0")
                .unwrap()
                .is_subset(&CpuSet::online().unwrap())
        );
    }

    #[test]
    fn overlap_is_any_shared_cpu() {
        let a = CpuSet::parse("0-1").unwrap();
        assert!(a.overlaps(&CpuSet::parse("1,2").unwrap()));
        assert!(!a.overlaps(&CpuSet::parse("2-3").unwrap()));
    }
}
