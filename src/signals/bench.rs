//! `sendguard bench links`: what finding links costs per invite, on a 2,000-character message
//! (the longest the API accepts) of ordinary prose with a few links and dotted words in it.

use std::time::Instant;

use super::links;

/// The message measured: prose with version numbers, abbreviations and file names (which must
/// not count), two links and an email address, cut to exactly 2,000 characters.
pub fn sample_message() -> String {
    let prose = "Hi team, the v2.0 draft of the Q3 report is ready, e.g. the figures in report.pdf \
                 and the notes in doc_42 are updated. Please review sections 1.5 and 3.14 before \
                 Friday; Mr. Smith will join the call at 10.30. ";
    let links = "The deck is at https://drive.example.com/d/42?view=1 and the old one at \
                 files.example[.]org/deck, questions to ana.lima@example.com. ";
    let mut text = String::with_capacity(2100);
    while text.chars().count() < 2000 {
        text.push_str(prose);
        text.push_str(links);
    }
    text.chars().take(2000).collect()
}

/// The median time of one call, in microseconds, over `iterations` calls.
pub(crate) fn median_micros(iterations: usize, mut call: impl FnMut() -> usize) -> (f64, usize) {
    let mut times = Vec::with_capacity(iterations);
    let mut found = 0;
    for _ in 0..iterations {
        let started = Instant::now();
        found = std::hint::black_box(call());
        times.push(started.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], found)
}

/// One measured row: what was called, the median per call, and how many links it found.
#[derive(Debug, Clone)]
pub struct LinkBench {
    pub call: &'static str,
    pub median_us: f64,
    pub links: usize,
}

pub fn run(iterations: usize) -> Vec<LinkBench> {
    let message = sample_message();
    let iterations = iterations.max(1);
    let (find_us, found) = median_micros(iterations, || links::find(&message).len());
    let (has_us, _) = median_micros(iterations, || usize::from(links::has_link(&message)));
    let plain = "Hi team, the v2.0 draft of the Q3 report is ready. ".repeat(40);
    let plain: String = plain.chars().take(2000).collect();
    let (plain_us, none) = median_micros(iterations, || links::find(&plain).len());
    vec![
        LinkBench {
            call: "find, 2,000 chars with links",
            median_us: find_us,
            links: found,
        },
        LinkBench {
            call: "has_link, 2,000 chars with links",
            median_us: has_us,
            links: usize::from(found > 0),
        },
        LinkBench {
            call: "find, 2,000 chars of prose",
            median_us: plain_us,
            links: none,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_has_its_links_and_no_false_ones() {
        let message = sample_message();
        assert_eq!(message.chars().count(), 2000);
        let hosts: Vec<String> = links::find(&message).into_iter().map(|l| l.host).collect();
        assert!(
            hosts
                .iter()
                .all(|h| h.ends_with("example.com") || h.ends_with("example.org")),
            "{hosts:?}"
        );
        assert!(hosts.len() >= 3, "{hosts:?}");
    }
}
