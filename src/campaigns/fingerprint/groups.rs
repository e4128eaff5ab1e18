//! Grouping a whole corpus offline, for evaluations: the exact near-duplicate groups (by the
//! Jaccard index), and the groups the fingerprint forms when texts arrive in order.

use super::signature::{shingle_set, shingle_set_jaccard};
use super::{Index, normalise, of_invite};

/// For each text, its group of near-duplicates: the connected components of "Jaccard index of
/// the normalised word 3-shingles at least `threshold`", each named by its first text's
/// position. Compares every pair (quadratic), skipping pairs whose sizes alone rule it out.
pub fn near_duplicates(texts: &[&str], threshold: f64) -> Vec<usize> {
    let sets: Vec<Vec<u64>> = texts.iter().map(|t| shingle_set(&normalise(t))).collect();
    let mut parent: Vec<usize> = (0..texts.len()).collect();
    for (i, a) in sets.iter().enumerate() {
        for (j, b) in sets.iter().enumerate().skip(i + 1) {
            let (small, large) = (a.len().min(b.len()), a.len().max(b.len()));
            // The index is at most |small| / |large|.
            if (small as f64) < threshold * large as f64 {
                continue;
            }
            if shingle_set_jaccard(a, b) >= threshold {
                let (ri, rj) = (root(&mut parent, i), root(&mut parent, j));
                parent[ri.max(rj)] = ri.min(rj);
            }
        }
    }
    (0..texts.len()).map(|i| root(&mut parent, i)).collect()
}

fn root(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

/// For each text taken as an invite's message, in order, the group its fingerprint joins: the
/// position of the first text whose signature it matches ([`Index::find`]), else its own; `None`
/// for a text too short to have a fingerprint.
pub fn fingerprint_groups(texts: &[&str]) -> Vec<Option<usize>> {
    let mut index = Index::new();
    texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let fingerprint = of_invite(Some(text), None)?;
            if let Some(&group) = index.find(&fingerprint.signature) {
                return Some(group);
            }
            index.insert(fingerprint.signature, i);
            Some(i)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_duplicates_form_one_group_and_others_their_own() {
        let texts = [
            "Your parcel is waiting, call +1 555 0199 to claim it today, ref 4471, Anna",
            "Ana made a new board for the spring launch, have a look and add your notes",
            "Your parcel is waiting, call +1 555 0123 to claim it today, ref 9911, Bob",
            "YOUR PARCEL is waiting! Call +1 (555) 0100 to claim it today. Ref 12, Anna",
            "short",
        ];
        assert_eq!(near_duplicates(&texts, 0.7), [0, 1, 0, 0, 4]);
        assert_eq!(
            fingerprint_groups(&texts),
            [Some(0), Some(1), Some(0), Some(0), None]
        );
    }
}
