//! Look-alikes of Latin letters, folded to the letter they imitate: Cyrillic `а`, Greek `ο`,
//! Cherokee `Ꭺ` and the like. Derived from Unicode's confusables data (UTS #39, the table
//! behind its "skeleton"), keeping the entries that map one letter, unchanged by NFKC, to one
//! ASCII letter (combining overlays aside). NFKC already folds full-width and mathematical
//! letters; digits are masked apart, so look-alikes of digits are left out.

/// Sorted by the look-alike, for a binary search.
#[rustfmt::skip]
const TABLE: &[(char, char)] = &[
    ('\u{d0}', 'd'), ('\u{d8}', 'o'), ('\u{f8}', 'o'), ('\u{fe}', 'p'),
    ('\u{110}', 'd'), ('\u{111}', 'd'), ('\u{126}', 'h'), ('\u{127}', 'h'),
    ('\u{131}', 'i'), ('\u{141}', 'l'), ('\u{142}', 'l'), ('\u{14b}', 'n'),
    ('\u{166}', 't'), ('\u{167}', 't'), ('\u{180}', 'b'), ('\u{182}', 'b'),
    ('\u{183}', 'b'), ('\u{184}', 'b'), ('\u{189}', 'd'), ('\u{18b}', 'd'),
    ('\u{18c}', 'd'), ('\u{18d}', 'g'), ('\u{191}', 'f'), ('\u{192}', 'f'),
    ('\u{196}', 'l'), ('\u{197}', 'l'), ('\u{199}', 'k'), ('\u{19a}', 'l'),
    ('\u{19d}', 'n'), ('\u{19e}', 'n'), ('\u{19f}', 'o'), ('\u{1a5}', 'p'),
    ('\u{1a6}', 'r'), ('\u{1ab}', 't'), ('\u{1ad}', 't'), ('\u{1ae}', 't'),
    ('\u{1b4}', 'y'), ('\u{1b5}', 'z'), ('\u{1b6}', 'z'), ('\u{1bd}', 's'),
    ('\u{1bf}', 'p'), ('\u{1c0}', 'l'), ('\u{1e4}', 'g'), ('\u{1e5}', 'g'),
    ('\u{224}', 'z'), ('\u{225}', 'z'), ('\u{237}', 'j'), ('\u{23c}', 'c'),
    ('\u{23e}', 't'), ('\u{244}', 'u'), ('\u{246}', 'e'), ('\u{247}', 'e'),
    ('\u{248}', 'j'), ('\u{249}', 'j'), ('\u{24c}', 'r'), ('\u{24d}', 'r'),
    ('\u{24e}', 'y'), ('\u{24f}', 'y'), ('\u{251}', 'a'), ('\u{253}', 'b'),
    ('\u{256}', 'd'), ('\u{257}', 'd'), ('\u{25f}', 'j'), ('\u{260}', 'g'),
    ('\u{261}', 'g'), ('\u{263}', 'y'), ('\u{266}', 'h'), ('\u{268}', 'i'),
    ('\u{269}', 'i'), ('\u{26a}', 'i'), ('\u{26b}', 'l'), ('\u{26d}', 'l'),
    ('\u{26f}', 'w'), ('\u{272}', 'n'), ('\u{273}', 'n'), ('\u{275}', 'o'),
    ('\u{27c}', 'r'), ('\u{27d}', 'r'), ('\u{282}', 's'), ('\u{284}', 'f'),
    ('\u{28b}', 'u'), ('\u{28f}', 'y'), ('\u{290}', 'z'), ('\u{2a0}', 'q'),
    ('\u{37f}', 'j'), ('\u{391}', 'a'), ('\u{392}', 'b'), ('\u{395}', 'e'),
    ('\u{396}', 'z'), ('\u{397}', 'h'), ('\u{398}', 'o'), ('\u{399}', 'l'),
    ('\u{39a}', 'k'), ('\u{39c}', 'm'), ('\u{39d}', 'n'), ('\u{39f}', 'o'),
    ('\u{3a1}', 'p'), ('\u{3a4}', 't'), ('\u{3a5}', 'y'), ('\u{3a7}', 'x'),
    ('\u{3b1}', 'a'), ('\u{3b3}', 'y'), ('\u{3b7}', 'n'), ('\u{3b8}', 'o'),
    ('\u{3b9}', 'i'), ('\u{3bd}', 'v'), ('\u{3bf}', 'o'), ('\u{3c1}', 'p'),
    ('\u{3c3}', 'o'), ('\u{3c5}', 'u'), ('\u{3dc}', 'f'), ('\u{3ed}', 'o'),
    ('\u{3f3}', 'j'), ('\u{3f8}', 'p'), ('\u{3fa}', 'm'), ('\u{405}', 's'),
    ('\u{406}', 'l'), ('\u{408}', 'j'), ('\u{410}', 'a'), ('\u{411}', 'b'),
    ('\u{412}', 'b'), ('\u{415}', 'e'), ('\u{41a}', 'k'), ('\u{41c}', 'm'),
    ('\u{41d}', 'h'), ('\u{41e}', 'o'), ('\u{420}', 'p'), ('\u{421}', 'c'),
    ('\u{422}', 't'), ('\u{423}', 'y'), ('\u{425}', 'x'), ('\u{42c}', 'b'),
    ('\u{430}', 'a'), ('\u{433}', 'r'), ('\u{435}', 'e'), ('\u{43e}', 'o'),
    ('\u{440}', 'p'), ('\u{441}', 'c'), ('\u{443}', 'y'), ('\u{445}', 'x'),
    ('\u{448}', 'w'), ('\u{455}', 's'), ('\u{456}', 'i'), ('\u{458}', 'j'),
    ('\u{45b}', 'h'), ('\u{45f}', 'u'), ('\u{461}', 'w'), ('\u{462}', 'b'),
    ('\u{463}', 'b'), ('\u{472}', 'o'), ('\u{473}', 'o'), ('\u{474}', 'v'),
    ('\u{475}', 'v'), ('\u{48c}', 'b'), ('\u{48d}', 'b'), ('\u{493}', 'r'),
    ('\u{49a}', 'k'), ('\u{49e}', 'k'), ('\u{4a2}', 'h'), ('\u{4aa}', 'c'),
    ('\u{4ab}', 'c'), ('\u{4ac}', 't'), ('\u{4ae}', 'y'), ('\u{4af}', 'y'),
    ('\u{4b0}', 'y'), ('\u{4b1}', 'y'), ('\u{4b2}', 'x'), ('\u{4ba}', 'h'),
    ('\u{4bb}', 'h'), ('\u{4bd}', 'e'), ('\u{4bf}', 'e'), ('\u{4c0}', 'l'),
    ('\u{4c7}', 'h'), ('\u{4c9}', 'h'), ('\u{4cd}', 'm'), ('\u{4cf}', 'l'),
    ('\u{4e8}', 'o'), ('\u{4e9}', 'o'), ('\u{501}', 'd'), ('\u{50c}', 'g'),
    ('\u{51a}', 'q'), ('\u{51b}', 'q'), ('\u{51c}', 'w'), ('\u{51d}', 'w'),
    ('\u{54d}', 'u'), ('\u{54f}', 's'), ('\u{555}', 'o'), ('\u{561}', 'w'),
    ('\u{563}', 'q'), ('\u{566}', 'q'), ('\u{570}', 'h'), ('\u{572}', 'n'),
    ('\u{575}', 'j'), ('\u{578}', 'n'), ('\u{57c}', 'n'), ('\u{57d}', 'u'),
    ('\u{581}', 'g'), ('\u{582}', 'i'), ('\u{584}', 'f'), ('\u{585}', 'o'),
    ('\u{5d5}', 'l'), ('\u{5d8}', 'v'), ('\u{5df}', 'l'), ('\u{5e1}', 'o'),
    ('\u{627}', 'l'), ('\u{629}', 'o'), ('\u{647}', 'o'), ('\u{6be}', 'o'),
    ('\u{6c1}', 'o'), ('\u{6c3}', 'o'), ('\u{6d5}', 'o'), ('\u{6ff}', 'o'),
    ('\u{7ca}', 'l'), ('\u{7cb}', 'o'), ('\u{7cc}', 'y'), ('\u{7d3}', 'f'),
    ('\u{7d5}', 'b'), ('\u{7e0}', 't'), ('\u{840}', 'o'), ('\u{b20}', 'o'),
    ('\u{d1f}', 's'), ('\u{d20}', 'o'), ('\u{1004}', 'c'), ('\u{101d}', 'o'),
    ('\u{105a}', 'c'), ('\u{10b9}', 'h'), ('\u{10bd}', 's'), ('\u{10cd}', 'z'),
    ('\u{10e7}', 'y'), ('\u{10fd}', 's'), ('\u{10ff}', 'o'), ('\u{110b}', 'o'),
    ('\u{11bc}', 'o'), ('\u{1200}', 'u'), ('\u{12d0}', 'o'), ('\u{1340}', 'o'),
    ('\u{13a0}', 'd'), ('\u{13a1}', 'r'), ('\u{13a2}', 't'), ('\u{13a4}', 'o'),
    ('\u{13a5}', 'i'), ('\u{13a9}', 'y'), ('\u{13aa}', 'a'), ('\u{13ab}', 'j'),
    ('\u{13ac}', 'e'), ('\u{13b3}', 'w'), ('\u{13b7}', 'm'), ('\u{13bb}', 'h'),
    ('\u{13bd}', 'y'), ('\u{13be}', 'o'), ('\u{13bf}', 't'), ('\u{13c0}', 'g'),
    ('\u{13c2}', 'h'), ('\u{13c3}', 'z'), ('\u{13cc}', 'u'), ('\u{13cf}', 'b'),
    ('\u{13d2}', 'r'), ('\u{13d4}', 'w'), ('\u{13d5}', 's'), ('\u{13d9}', 'v'),
    ('\u{13da}', 's'), ('\u{13de}', 'l'), ('\u{13df}', 'c'), ('\u{13e2}', 'p'),
    ('\u{13e6}', 'k'), ('\u{13e7}', 'd'), ('\u{13eb}', 'o'), ('\u{13f2}', 'h'),
    ('\u{13f3}', 'g'), ('\u{13f4}', 'b'), ('\u{142f}', 'v'), ('\u{144c}', 'u'),
    ('\u{146d}', 'p'), ('\u{146f}', 'd'), ('\u{1472}', 'b'), ('\u{1473}', 'b'),
    ('\u{148d}', 'j'), ('\u{14aa}', 'l'), ('\u{1541}', 'x'), ('\u{157c}', 'h'),
    ('\u{157d}', 'x'), ('\u{1587}', 'r'), ('\u{15af}', 'b'), ('\u{15b4}', 'f'),
    ('\u{15c5}', 'a'), ('\u{15de}', 'd'), ('\u{15ea}', 'd'), ('\u{15f0}', 'm'),
    ('\u{15f7}', 'b'), ('\u{16b7}', 'x'), ('\u{16c1}', 'l'), ('\u{16c5}', 'l'),
    ('\u{16d0}', 'l'), ('\u{16d5}', 'k'), ('\u{16d6}', 'm'), ('\u{1763}', 'x'),
    ('\u{1a45}', 'o'), ('\u{1c82}', 'o'), ('\u{1c83}', 'c'), ('\u{1cbd}', 's'),
    ('\u{1cbf}', 'o'), ('\u{1cf5}', 'x'), ('\u{1d04}', 'c'), ('\u{1d0f}', 'o'),
    ('\u{1d11}', 'o'), ('\u{1d1c}', 'u'), ('\u{1d20}', 'v'), ('\u{1d21}', 'w'),
    ('\u{1d22}', 'z'), ('\u{1d26}', 'r'), ('\u{1d6e}', 'f'), ('\u{1d70}', 'n'),
    ('\u{1d72}', 'r'), ('\u{1d74}', 's'), ('\u{1d75}', 't'), ('\u{1d76}', 'z'),
    ('\u{1d7b}', 'i'), ('\u{1d7c}', 'i'), ('\u{1d7d}', 'p'), ('\u{1d7e}', 'u'),
    ('\u{1d83}', 'g'), ('\u{1d8c}', 'y'), ('\u{1e9d}', 'f'), ('\u{1eff}', 'y'),
    ('\u{2c67}', 'h'), ('\u{2c69}', 'k'), ('\u{2c6b}', 'z'), ('\u{2c6c}', 'z'),
    ('\u{2c82}', 'b'), ('\u{2c85}', 'r'), ('\u{2c8c}', 'z'), ('\u{2c8d}', 'z'),
    ('\u{2c8e}', 'h'), ('\u{2c90}', 'o'), ('\u{2c91}', 'o'), ('\u{2c92}', 'l'),
    ('\u{2c93}', 'i'), ('\u{2c94}', 'k'), ('\u{2c98}', 'm'), ('\u{2c9a}', 'n'),
    ('\u{2c9e}', 'o'), ('\u{2c9f}', 'o'), ('\u{2ca2}', 'p'), ('\u{2ca3}', 'p'),
    ('\u{2ca4}', 'c'), ('\u{2ca5}', 'c'), ('\u{2ca6}', 't'), ('\u{2ca8}', 'y'),
    ('\u{2ca9}', 'y'), ('\u{2cac}', 'x'), ('\u{2cbd}', 'w'), ('\u{2cce}', 'p'),
    ('\u{2ccf}', 'p'), ('\u{2cd0}', 'l'), ('\u{2d2d}', 'z'), ('\u{2d31}', 'o'),
    ('\u{2d38}', 'v'), ('\u{2d39}', 'e'), ('\u{2d41}', 'o'), ('\u{2d4a}', 'l'),
    ('\u{2d4f}', 'l'), ('\u{2d54}', 'o'), ('\u{2d55}', 'q'), ('\u{2d5d}', 'x'),
    ('\u{3112}', 't'), ('\u{311a}', 'y'), ('\u{4e05}', 't'), ('\u{4e2b}', 'y'),
    ('\u{a4d0}', 'b'), ('\u{a4d1}', 'p'), ('\u{a4d2}', 'd'), ('\u{a4d3}', 'd'),
    ('\u{a4d4}', 't'), ('\u{a4d6}', 'g'), ('\u{a4d7}', 'k'), ('\u{a4d9}', 'j'),
    ('\u{a4da}', 'c'), ('\u{a4dc}', 'z'), ('\u{a4dd}', 'f'), ('\u{a4df}', 'm'),
    ('\u{a4e0}', 'n'), ('\u{a4e1}', 'l'), ('\u{a4e2}', 's'), ('\u{a4e3}', 'r'),
    ('\u{a4e6}', 'v'), ('\u{a4e7}', 'h'), ('\u{a4ea}', 'w'), ('\u{a4eb}', 'x'),
    ('\u{a4ec}', 'y'), ('\u{a4ee}', 'a'), ('\u{a4f0}', 'e'), ('\u{a4f2}', 'l'),
    ('\u{a4f3}', 'o'), ('\u{a4f4}', 'u'), ('\u{a50b}', 't'), ('\u{a557}', 'b'),
    ('\u{a56f}', 'l'), ('\u{a576}', 's'), ('\u{a5cb}', 'e'), ('\u{a647}', 'i'),
    ('\u{a68c}', 't'), ('\u{a695}', 'h'), ('\u{a6a2}', 'o'), ('\u{a6b2}', 'y'),
    ('\u{a6c9}', 'z'), ('\u{a6df}', 'v'), ('\u{a731}', 's'), ('\u{a740}', 'k'),
    ('\u{a74a}', 'o'), ('\u{a74b}', 'o'), ('\u{a761}', 'w'), ('\u{a781}', 'l'),
    ('\u{a798}', 'f'), ('\u{a799}', 'f'), ('\u{a79f}', 'u'), ('\u{a7ae}', 'l'),
    ('\u{a7b2}', 'j'), ('\u{a7b3}', 'x'), ('\u{a7b4}', 'b'), ('\u{a7c5}', 's'),
    ('\u{a7fa}', 'w'), ('\u{a7fe}', 'l'), ('\u{ab32}', 'e'), ('\u{ab35}', 'f'),
    ('\u{ab3d}', 'o'), ('\u{ab3e}', 'o'), ('\u{ab47}', 'r'), ('\u{ab48}', 'r'),
    ('\u{ab4e}', 'u'), ('\u{ab52}', 'u'), ('\u{ab5a}', 'y'), ('\u{ab64}', 'a'),
    ('\u{ab74}', 'o'), ('\u{ab75}', 'i'), ('\u{ab81}', 'r'), ('\u{ab83}', 'w'),
    ('\u{ab8e}', 'o'), ('\u{ab93}', 'z'), ('\u{ab9c}', 'u'), ('\u{aba4}', 'w'),
    ('\u{aba9}', 'v'), ('\u{abaa}', 's'), ('\u{abaf}', 'c'), ('\u{abbb}', 'o'),
    ('\u{10282}', 'b'), ('\u{10286}', 'e'), ('\u{10287}', 'f'), ('\u{1028a}', 'l'),
    ('\u{10290}', 'x'), ('\u{10292}', 'o'), ('\u{10295}', 'p'), ('\u{10296}', 's'),
    ('\u{10297}', 't'), ('\u{102a0}', 'a'), ('\u{102a1}', 'b'), ('\u{102a2}', 'c'),
    ('\u{102a5}', 'f'), ('\u{102ab}', 'o'), ('\u{102b0}', 'm'), ('\u{102b1}', 't'),
    ('\u{102b2}', 'y'), ('\u{102b4}', 'x'), ('\u{102cf}', 'h'), ('\u{10301}', 'b'),
    ('\u{10302}', 'c'), ('\u{10309}', 'l'), ('\u{1030f}', 'o'), ('\u{10311}', 'm'),
    ('\u{10315}', 't'), ('\u{10317}', 'x'), ('\u{1031c}', 'b'), ('\u{10404}', 'o'),
    ('\u{10415}', 'c'), ('\u{1041b}', 'l'), ('\u{10420}', 's'), ('\u{1042c}', 'o'),
    ('\u{1043d}', 'c'), ('\u{10448}', 's'), ('\u{104b4}', 'r'), ('\u{104c2}', 'o'),
    ('\u{104ce}', 'u'), ('\u{104ea}', 'o'), ('\u{104f6}', 'u'), ('\u{10507}', 'z'),
    ('\u{1050e}', 'l'), ('\u{10513}', 'n'), ('\u{10516}', 'o'), ('\u{10518}', 'k'),
    ('\u{1051b}', 'c'), ('\u{1051d}', 'v'), ('\u{1051e}', 'o'), ('\u{10525}', 'f'),
    ('\u{10526}', 'l'), ('\u{10527}', 'x'), ('\u{10926}', 'l'), ('\u{1092c}', 'o'),
    ('\u{10c13}', 'x'), ('\u{10c17}', 'o'), ('\u{10c1f}', 'v'), ('\u{10c20}', 'y'),
    ('\u{10c21}', 'm'), ('\u{10c3e}', 'l'), ('\u{10c82}', 'x'), ('\u{10ca5}', 'l'),
    ('\u{10cc2}', 'x'), ('\u{10d07}', 'o'), ('\u{11124}', 'o'), ('\u{113d4}', 'l'),
    ('\u{114c5}', 'w'), ('\u{11706}', 'v'), ('\u{1170a}', 'w'), ('\u{1170e}', 'w'),
    ('\u{1170f}', 'w'), ('\u{118a0}', 'v'), ('\u{118a2}', 'f'), ('\u{118a3}', 'l'),
    ('\u{118a4}', 'y'), ('\u{118a6}', 'e'), ('\u{118a9}', 'z'), ('\u{118ae}', 'e'),
    ('\u{118b2}', 'l'), ('\u{118b5}', 'o'), ('\u{118b8}', 'u'), ('\u{118bc}', 't'),
    ('\u{118c0}', 'v'), ('\u{118c1}', 's'), ('\u{118c2}', 'f'), ('\u{118c3}', 'i'),
    ('\u{118c4}', 'y'), ('\u{118c8}', 'o'), ('\u{118d7}', 'o'), ('\u{118d8}', 'u'),
    ('\u{118dc}', 'y'), ('\u{11abc}', 'z'), ('\u{11abe}', 'n'), ('\u{11dda}', 'l'),
    ('\u{11de0}', 'o'), ('\u{11de1}', 'l'), ('\u{1699b}', 'o'), ('\u{16a19}', 'r'),
    ('\u{16ad6}', 's'), ('\u{16ae4}', 'l'), ('\u{16ae9}', 'o'), ('\u{16d63}', 'l'),
    ('\u{16eaa}', 'l'), ('\u{16eb6}', 'b'), ('\u{16f08}', 'v'), ('\u{16f0a}', 't'),
    ('\u{16f16}', 'l'), ('\u{16f28}', 'l'), ('\u{16f35}', 'r'), ('\u{16f3a}', 's'),
    ('\u{16f40}', 'a'), ('\u{16f42}', 'u'), ('\u{16f43}', 'y'), ('\u{1ccd6}', 'a'),
    ('\u{1ccd7}', 'b'), ('\u{1ccd8}', 'c'), ('\u{1ccd9}', 'd'), ('\u{1ccda}', 'e'),
    ('\u{1ccdb}', 'f'), ('\u{1ccdc}', 'g'), ('\u{1ccdd}', 'h'), ('\u{1ccde}', 'l'),
    ('\u{1ccdf}', 'j'), ('\u{1cce0}', 'k'), ('\u{1cce1}', 'l'), ('\u{1cce2}', 'm'),
    ('\u{1cce3}', 'n'), ('\u{1cce4}', 'o'), ('\u{1cce5}', 'p'), ('\u{1cce6}', 'q'),
    ('\u{1cce7}', 'r'), ('\u{1cce8}', 's'), ('\u{1cce9}', 't'), ('\u{1ccea}', 'u'),
    ('\u{1cceb}', 'v'), ('\u{1ccec}', 'w'), ('\u{1cced}', 'x'), ('\u{1ccee}', 'y'),
    ('\u{1ccef}', 'z'), ('\u{1ccf0}', 'o'), ('\u{1ccf1}', 'l'), ('\u{1cefc}', 'v'),
    ('\u{1df2d}', 'd'), ('\u{1df31}', 'y'), ('\u{1df32}', 'h'), ('\u{1df34}', 'q'),
    ('\u{1df37}', 'r'), ('\u{1df39}', 'u'), ('\u{1df3c}', 'o'), ('\u{1df3f}', 'w'),
    ('\u{1df40}', 'a'), ('\u{1df41}', 'a'), ('\u{1df45}', 'g'), ('\u{1df46}', 'h'),
    ('\u{1df47}', 'h'), ('\u{1df48}', 'k'), ('\u{1df49}', 'k'), ('\u{1df4a}', 'm'),
    ('\u{1df4d}', 'n'), ('\u{1df4e}', 'n'), ('\u{1df4f}', 'n'), ('\u{1df51}', 'v'),
    ('\u{1df52}', 'v'), ('\u{1df55}', 'y'), ('\u{1df5a}', 'a'), ('\u{1df6a}', 'a'),
    ('\u{1df6e}', 'l'), ('\u{1df7d}', 'w'), ('\u{1df81}', 'e'),
];

/// Where the look-alikes of texts in the wild mostly come from (Latin-1 to the end of Cyrillic
/// Supplement), looked up directly: a disguised text has one in every few characters.
const DIRECT: std::ops::Range<u32> = 0x80..0x530;
/// For each code point of [`DIRECT`], the letter it imitates (0: none).
static DIRECT_TABLE: [u8; (DIRECT.end - DIRECT.start) as usize] = direct_table();

const fn direct_table() -> [u8; (DIRECT.end - DIRECT.start) as usize] {
    let mut table = [0; (DIRECT.end - DIRECT.start) as usize];
    let mut i = 0;
    while i < TABLE.len() {
        let (from, to) = TABLE[i];
        if from as u32 >= DIRECT.start && (from as u32) < DIRECT.end {
            table[(from as u32 - DIRECT.start) as usize] = to as u8;
        }
        i += 1;
    }
    table
}

/// The ASCII letter (lower case) that `c` imitates, if `c` is a look-alike of [`DIRECT`].
pub(super) fn fold_direct(c: char) -> Option<char> {
    let letter = *DIRECT_TABLE.get((c as u32).checked_sub(DIRECT.start)? as usize)?;
    (letter != 0).then_some(letter as char)
}

/// The ASCII letter (lower case) that `c` imitates, if any.
pub(super) fn fold(c: char) -> Option<char> {
    if DIRECT.contains(&(c as u32)) {
        return fold_direct(c);
    }
    TABLE
        .binary_search_by_key(&c, |&(from, _)| from)
        .ok()
        .and_then(|i| TABLE.get(i))
        .map(|&(_, to)| to)
}

#[cfg(test)]
mod tests {
    use icu_properties::CodePointMapData;
    use icu_properties::props::GeneralCategory;

    use super::*;

    #[test]
    fn the_direct_table_agrees_with_the_list() {
        for c in (DIRECT.start..DIRECT.end).filter_map(char::from_u32) {
            let listed = TABLE
                .iter()
                .find(|&&(from, _)| from == c)
                .map(|&(_, to)| to);
            assert_eq!(fold(c), listed, "{c:?}");
        }
        assert!(TABLE.iter().all(|&(_, to)| to.is_ascii_lowercase()));
        // What `normalise` relies on to take these without NFKC (`Simple`): letters, which no
        // mark precedes in a composition.
        let category = CodePointMapData::<GeneralCategory>::new();
        for &(from, _) in TABLE
            .iter()
            .filter(|(from, _)| DIRECT.contains(&(*from as u32)))
        {
            let letter = matches!(
                category.get(from),
                GeneralCategory::UppercaseLetter
                    | GeneralCategory::LowercaseLetter
                    | GeneralCategory::TitlecaseLetter
                    | GeneralCategory::ModifierLetter
                    | GeneralCategory::OtherLetter
            );
            assert!(letter, "{from:?} is not a letter");
        }
        assert!(TABLE.windows(2).all(|w| w[0].0 < w[1].0), "sorted");
    }
}
