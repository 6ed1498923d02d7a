"""Reference values for corpus BLEU: sacrebleu's `corpus_bleu(hyps, [refs])` with its defaults
(13a tokenizer, 'exp' smoothing, mixed case, no effective order, n-grams up to 4, one reference).

Each case stores its hypotheses and references, each line as sacrebleu's 13a tokenizer leaves it
(after `rstrip`, as BLEU preprocesses a segment), and the score with its statistics: n-gram
counts and totals, precisions (percent), brevity penalty, system and reference lengths. The
cases cover the tokenizer's rules one by one (punctuation, numbers, dashes, quotes and HTML
entities, newlines, Unicode letters and spaces) and each branch of the score (brevity penalty,
smoothing of orders without matches, no match at all, hypotheses shorter than four tokens).
src/score/bleu.rs's tests read the JSON without Python.

    pip install sacrebleu==2.6.0
    python3 tests/reference/gen_bleu.py   (or generate.py for every file)
"""

import json
import pathlib
import random

import sacrebleu
from sacrebleu.metrics import BLEU

OUTPUT = "bleu_vectors.json"

CAT = "the cat sat on the mat"


def cases():
    c = {}
    # Scores of 100 and 0, and the brevity penalty.
    c["identical_sentence"] = ([CAT], [CAT])
    c["identical_corpus"] = (
        [CAT, "a quick brown fox jumps over the lazy dog", "Hello, world!"],
        [CAT, "a quick brown fox jumps over the lazy dog", "Hello, world!"],
    )
    c["empty_hypothesis"] = ([""], [CAT])
    c["empty_hypothesis_in_corpus"] = (["", CAT], ["a quick brown fox jumps over the lazy dog", CAT])
    c["empty_reference"] = (["something here"], [""])
    c["both_empty"] = ([""], [""])
    c["shorter_hypothesis"] = (["the cat sat on"], [CAT])
    c["longer_hypothesis"] = (["the cat sat on the mat today and again"], [CAT])
    c["one_long_one_short"] = (
        ["the cat sat on the mat all day long", "a fox"],
        [CAT, "a quick brown fox jumps"],
    )
    # Orders without any match: 'exp' smoothing halves each in turn.
    c["no_4gram_match"] = (["the cat is on the mat"], [CAT])
    c["no_3gram_or_4gram_match"] = (["cat the mat the"], [CAT])
    c["unigram_matches_only"] = (["mat the on cat sat"], [CAT])
    c["no_match_at_all"] = (["dogs bark loudly"], [CAT])
    c["fewer_than_four_tokens"] = (["the cat"], ["the cat"])
    c["three_tokens"] = (["the cat sat"], ["the cat sat"])
    c["clipped_counts"] = (["the the the the the the the"], ["the cat is on the mat"])
    c["case_sensitive"] = (["The Cat Sat On The Mat"], [CAT])
    # The 13a tokenizer's rules.
    c["punctuation"] = (
        ["Hello, world! How are you? (fine; thanks) [ok] {yes} a/b <tag> x+y=z @me #1 $5 50% ^_^ `q` a|b ~"],
        ["Hello world, how are you? (fine: thanks) [ok] {no} a / b <tag> x + y = z @me #1 $ 5 50 % ^_^"],
    )
    c["numbers"] = (
        ["It costs 1,000.50 dollars, or 3.14 times 2,5 of 10. Version 2.0.1, 7,a and b,7 ,5 5, .5 5."],
        ["It costs 1,000 dollars, or 3.14 times 2.5 of 10. Version 2.0.1 and 7, 5."],
    )
    c["periods_and_commas_in_runs"] = (
        ["Wait... what?! a.,b 1..2 1.,2 U.S.A. x,,y 3., .,4 ..."],
        ["Wait ... what ?! a . , b 1 . . 2 U.S.A. x , , y"],
    )
    c["dashes"] = (
        ["a state-of-the-art e-mail from 1990-2000, -5 and 10- or 3--4 - done -- ok"],
        ["a state of the art email from 1990 - 2000, -5 and 10 - or 3 -- 4 - done"],
    )
    c["quotes_and_entities"] = (
        ['He said "hi" and \'bye\', &quot;quoted&quot; &amp; &lt;b&gt; &amp;quot; &unknown; R&D'],
        ['He said " hi " and \' bye \', "quoted" & <b> &quot; &unknown; R&D'],
    )
    c["newlines_and_skipped"] = (
        ["line one-\ncontinues\nline two <skipped> end \t \n", "trailing spaces   "],
        ["line onecontinues line two end", "trailing spaces"],
    )
    c["unicode_letters"] = (
        ["Café naïve résumé — “quoted” ‘single’ … €5 Straße ΑΒΓ δ 東京 に 行く"],
        ["Cafe naïve résumé – \"quoted\" 'single' ... € 5 Strasse ΑΒΓ δ 東京に行く"],
    )
    c["unicode_spaces"] = (
        ["no\u00a0break ideo\u3000space thin\u2009space sep\x1cfile sep\x1funit zero\u200bwidth"],
        ["no break ideo space thin space sep file sep unit zero width"],
    )
    c["tabs_and_runs_of_spaces"] = (["  the\tcat   sat\ton  the mat  "], [CAT])
    c["tokenized_period"] = (["the cat sat on the mat ."], ["the cat sat on the mat."])
    # Corpora of several sentences.
    c["realistic_translation"] = (
        [
            "The parliament adopted the resolution on Tuesday by a large majority.",
            "Prices rose by 3.5 percent in the second quarter, according to the office.",
            "He didn't want to comment on the matter.",
            "The new bridge, which cost 1,200 million euros, will open in 2025.",
        ],
        [
            "Parliament adopted the resolution by a large majority on Tuesday.",
            "According to the statistics office, prices rose 3.5 percent in the second quarter.",
            "He did not want to comment on the matter.",
            "The new bridge, which cost 1,200 million euros, is set to open in 2025.",
        ],
    )
    c["realistic_news"] = (
        [
            "Scientists have discovered a new species of frog in the rainforest of Peru.",
            "The team said the frog is about two centimetres long and lives near streams.",
            '"It was a complete surprise," said the lead researcher.',
        ],
        [
            "Scientists discovered a new frog species in Peru's rainforest.",
            "The frog is roughly two centimetres long and lives close to streams, the team said.",
            '"It was a total surprise," the lead researcher said.',
        ],
    )
    c["phonemes"] = (
        ["HH AH0 L OW1", "W ER1 L D", "P AY1 TH AA0 N", "K AE1 T"],
        ["HH AH0 L OW1", "W ER1 L D", "P AY1 TH AA2 N", "K AE1 T S"],
    )
    c["random_word_corpus"] = random_corpus()
    return c


def random_corpus():
    """Twenty sentences over a small vocabulary and their references with a few words changed,
    dropped or added: many partial matches at every order."""
    rng = random.Random(0)
    words = "the a cat dog sat ran on under mat rug and , . quickly slowly big small red".split()
    hyps, refs = [], []
    for _ in range(20):
        ref = [rng.choice(words) for _ in range(rng.randint(3, 15))]
        hyp = list(ref)
        for _ in range(rng.randint(0, 4)):
            edit = rng.choice(["swap", "drop", "add"])
            i = rng.randrange(len(hyp) + 1)
            if edit == "swap" and i < len(hyp):
                hyp[i] = rng.choice(words)
            elif edit == "drop" and i < len(hyp):
                del hyp[i]
            else:
                hyp.insert(i, rng.choice(words))
        hyps.append(" ".join(hyp))
        refs.append(" ".join(ref))
    return hyps, refs


def main(path):
    assert sacrebleu.__version__ == "2.6.0", f"expected sacrebleu 2.6.0, found {sacrebleu.__version__}"
    # The preprocessing of corpus_bleu's BLEU (13a tokenizer, mixed case) for the stored tokens.
    preprocess = BLEU()._preprocess_segment
    out = []
    for name, (hyps, refs) in cases().items():
        assert len(hyps) == len(refs), name
        b = sacrebleu.corpus_bleu(hyps, [refs])
        out.append(
            {
                "name": name,
                "hypotheses": hyps,
                "references": refs,
                "tokenized_hypotheses": [preprocess(h) for h in hyps],
                "tokenized_references": [preprocess(r) for r in refs],
                "score": b.score,
                "counts": b.counts,
                "totals": b.totals,
                "precisions": b.precisions,
                "bp": b.bp,
                "sys_len": b.sys_len,
                "ref_len": b.ref_len,
            }
        )
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(out)} cases to {path}")


if __name__ == "__main__":
    main(str(pathlib.Path(__file__).resolve().parent / OUTPUT))
