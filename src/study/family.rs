//! The family of every published claim: the README reports all studies' claims at once, so
//! they are adjusted together (Benjamini–Hochberg over every study's comparative claims, and
//! apart over their sanity checks), and a claim's verdict there reads that family's q.

use super::claims::{ClaimKind, Verdict};
use super::multiplicity::benjamini_hochberg;
use super::verdicts::ClaimReport;

/// One claim of the family.
pub struct FamilyClaim<'a> {
    pub study: &'a str,
    pub claim: &'a ClaimReport,
    /// `claim.p` adjusted over the family's claims of its kind.
    pub q: Option<f64>,
    /// Its verdict at the family's adjusted level.
    pub verdict: Verdict,
}

/// Adjusts the claims of every study (name, its claims) together at `alpha`.
pub fn adjust_family<'a>(studies: &[(&'a str, &'a [ClaimReport])], alpha: f64) -> Vec<FamilyClaim<'a>> {
    let all: Vec<(&str, &ClaimReport)> = studies
        .iter()
        .flat_map(|(study, claims)| claims.iter().map(move |c| (*study, c)))
        .collect();
    let mut family: Vec<FamilyClaim> = all
        .iter()
        .map(|&(study, claim)| FamilyClaim {
            study,
            claim,
            q: None,
            verdict: Verdict::NotShown,
        })
        .collect();
    for kind in [ClaimKind::Comparative, ClaimKind::Sanity] {
        let of_kind: Vec<usize> = (0..family.len())
            .filter(|&i| family[i].claim.kind == kind)
            .collect();
        let ps: Vec<Option<f64>> = of_kind.iter().map(|&i| family[i].claim.p).collect();
        for (&i, q) in of_kind.iter().zip(benjamini_hochberg(&ps)) {
            family[i].q = q;
            family[i].verdict = family[i].claim.verdict_at(q, alpha);
        }
    }
    family
}

/// How many claims of a list got each verdict.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub holds: usize,
    pub not_replicated: usize,
    pub at_chance: usize,
    pub not_shown: usize,
}

impl Tally {
    pub fn of(verdicts: impl IntoIterator<Item = Verdict>) -> Self {
        let mut t = Self::default();
        for v in verdicts {
            match v {
                Verdict::Holds => t.holds += 1,
                Verdict::NotReplicated => t.not_replicated += 1,
                Verdict::AtChance => t.at_chance += 1,
                Verdict::NotShown => t.not_shown += 1,
            }
        }
        t
    }

    pub fn total(&self) -> usize {
        self.holds + self.not_replicated + self.at_chance + self.not_shown
    }
}
