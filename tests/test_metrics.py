"""Tests for pytest_robustexplain.metrics: each formula on hand-computed examples, bounds, edge policies."""

from __future__ import annotations

import importlib.metadata
import math
import random
import subprocess
import sys
import threading

import pytest

from pytest_robustexplain import __version__
from pytest_robustexplain import metrics as m
from pytest_robustexplain.errors import ConfigError
from pytest_robustexplain.metrics import (
    PairScores,
    Scorer,
    compute_keyword_stability,
    compute_length_stability,
    compute_semantic_sim,
    compute_structural_consistency,
    metric_signature,
    score_pair,
    validate_weights,
    word_tokens,
)
from pytest_robustexplain.metrics import text as text_module

# An ~80-word explanation and an edited variant of it, as a run produces them.
ORIGINAL = (
    "Based on your history, you clearly enjoy science fiction films with clever plotting and strong "
    "characters. You rated Inception and The Matrix highly, which suggests a taste for mind-bending "
    "stories. Interstellar shares those roots and pairs them with a haunting score and striking "
    "visuals. Viewers who loved Inception often find it just as gripping, thanks to its emotional "
    "depth, so it should suit your viewing habits well."
)
PERTURBED = (
    "You clearly enjoy thoughtful science fiction with strong characters. Because you rated Arrival "
    "highly, Interstellar's emotional depth and striking visuals should appeal to you, and its "
    "haunting score rewards the attention you gave to similar films."
)

_VOCAB = ["the", "user", "film", "movie", "loves", "enjoys", "great", "dark", "comedy", "drama", "science",
          "fiction", "space", "story", "plot", "characters", "music", "visuals", "classic", "new", "old",
          "and", "with", "because", "rated", "highly", "thriller", "it", "is", "a"]
_PUNCT = (".", ",", "!", "?", ";", ":", "-", "(", ")", "'", '"')


@pytest.fixture(scope="module")
def scorer() -> Scorer:
    return Scorer()


def _random_text(rng: random.Random, n_words: int) -> str:
    parts = []
    for _ in range(n_words):
        word = rng.choice(_VOCAB)
        parts.append(word.capitalize() if rng.random() < 0.1 else word)
        if rng.random() < 0.15:
            parts.append(rng.choice(_PUNCT))
    return " ".join(parts)


# --------------------------------------------------------------------------------------------------
# Tokens


def test_word_tokens_lower_case_and_drop_punctuation() -> None:
    assert word_tokens("The Film, the MUSIC!  (And) the end...") == [
        "the", "film", "the", "music", "and", "the", "end"]


def test_word_tokens_treebank_clitics_compounds_and_numbers() -> None:
    text = "The user’s taste: don't they love sci-fi? Rated 4.5 by 1,000 viewers in the 1990s."
    assert word_tokens(text) == [
        "the", "user", "'s", "taste", "do", "n't", "they", "love", "sci-fi", "rated", "4.5", "by",
        "1,000", "viewers", "in", "the", "1990s"]


def test_word_tokens_of_quoted_title_keep_the_title() -> None:
    # A single-quoted title is not mistaken for a clitic ('d of 'Dune').
    assert word_tokens("You liked 'Dune' and 'Solaris'.") == ["you", "liked", "dune", "and", "solaris"]


def test_no_character_is_silently_lost_by_the_tokenizer() -> None:
    rng = random.Random(11)
    alphabet = "abcdn't'- .,!?0123456789é中"
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30)))
        tokens = m.all_tokens(text)
        assert "".join(tokens) == "".join(text.split()), text


# --------------------------------------------------------------------------------------------------
# Semantic: cosine of term-frequency vectors


def test_semantic_hand_computed(scorer: Scorer) -> None:
    # e  = the cat sat on the mat  -> tf: the 2, cat 1, sat 1, on 1, mat 1; Σtf² = 4+1+1+1+1 = 8
    # e′ = the cat ate the fish    -> tf: the 2, cat 1, ate 1, fish 1;      Σtf² = 4+1+1+1   = 7
    # dot = the 2·2 + cat 1·1 = 5;  cos = 5 / √(8·7) = 5 / √56 = 0.668153...
    value = compute_semantic_sim("The cat sat on the mat.", "the cat ate the fish")
    assert value == pytest.approx(5 / math.sqrt(56), abs=1e-12)
    assert value == pytest.approx(0.6681531, abs=1e-7)
    assert scorer.semantic("The cat sat on the mat.", "the cat ate the fish") == value


def test_semantic_ignores_case_punctuation_and_order() -> None:
    # Same bag of words: cos = 1.
    assert compute_semantic_sim("Great film, great cast!", "cast great film great") == pytest.approx(1.0)


def test_semantic_disjoint_is_zero() -> None:
    assert compute_semantic_sim("red apples grow", "blue cars drive fast") == 0.0


# --------------------------------------------------------------------------------------------------
# Keyword: Jaccard of noun/adjective sets


def test_keyword_sets_from_pattern_tagger(scorer: Scorer) -> None:
    # Pattern tags: happy/JJ dog/NN red/JJ ball/NN park/NN (the DT, chased VBN, a DT, in IN dropped).
    assert scorer.keywords("The happy dog chased a red ball in the park.") == {
        "happy", "dog", "red", "ball", "park"}
    # Proper nouns (NNP, NNPS) count, lower-cased after tagging (case is how they are found).
    assert scorer.keywords("They loved Star Wars and The Matrix.") == {"star", "wars", "matrix"}


def test_keyword_hand_computed() -> None:
    # K(e)  = {happy, dog, red, ball, park};  K(e′) = {happy, cat, red, bird}
    # |∩| = |{happy, red}| = 2;  |∪| = 5 + 4 − 2 = 7;  Jaccard = 2/7 = 0.285714...
    value = compute_keyword_stability("The happy dog chased a red ball in the park.",
                                      "A happy cat watched the red bird.")
    assert value == pytest.approx(2 / 7, abs=1e-12)


def test_keyword_disjoint_is_zero_and_not_flagged() -> None:
    scores = score_pair("The happy dog chased a red ball.", "Cold rivers carry heavy stones.")
    assert scores.keyword == 0.0
    assert scores.keyword_empty is False


def test_keyword_empty_union_scores_zero_and_is_flagged() -> None:
    # Pattern: I/PRP went/VBD there/EX; We/PRP will/MD go/VB soon/RB: no noun, no adjective.
    scores = score_pair("I went there.", "We will go soon!")
    assert scores.keyword == 0.0
    assert scores.keyword_empty is True
    assert scores.generation_failure is False
    assert compute_keyword_stability("I went there.", "We will go soon!") == 0.0


def test_keyword_one_side_empty_is_zero_but_not_flagged() -> None:
    # Union = {film, great} is not empty: Jaccard = 0/2 = 0, an ordinary score.
    scores = score_pair("I went there.", "A great film.")
    assert (scores.keyword, scores.keyword_empty) == (0.0, False)


def test_scoring_loads_nltk_and_textblob_only_as_their_packages_publish_them() -> None:
    """Tokens and tags come from nltk's and TextBlob's public modules: scoring loads no file of either
    package under a name outside it (the package once loaded TextBlob's private ``_text.py`` under its own
    name, issue 60), and the tokenizer is nltk's ``RegexpTokenizer`` on the package's pattern."""
    import subprocess
    import sys

    code = ("import os, sys; from pytest_robustexplain.metrics import score_pair; score_pair('A fine film.', "
            "'A good film.'); import nltk, textblob; "
            "roots = {n: os.path.dirname(sys.modules[n].__file__) for n in ('nltk', 'textblob')}; "
            "print(sorted(name for name, mod in list(sys.modules.items()) for pkg, root in roots.items() "
            "if (getattr(mod, '__file__', None) or '').startswith(root + os.sep) "
            "and name.split('.')[0] != pkg))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    from nltk.tokenize import RegexpTokenizer

    from pytest_robustexplain.metrics.base import TOKEN_FLAGS, TOKEN_PATTERN

    tokenizer = text_module.get_tokenizer()
    assert isinstance(tokenizer, RegexpTokenizer)
    assert tokenizer.tokenize("a-b c") == RegexpTokenizer(TOKEN_PATTERN, flags=TOKEN_FLAGS).tokenize("a-b c")
    assert m.all_tokens("Don't miss sci-fi: 4.5 stars, it's great") == [
        "Do", "n't", "miss", "sci-fi", ":", "4.5", "stars", ",", "it", "'s", "great"]


def test_direct_find_tags_equals_textblob_tag_with_tokenize_false() -> None:
    from textblob.en import tag

    rng = random.Random(5)
    texts = [ORIGINAL, PERTURBED, "a / b & c'd 'e' n't --- 3.5 é 中文"]
    texts += [_random_text(rng, rng.randint(1, 60)) for _ in range(100)]
    for text in texts:
        tokens = m.all_tokens(text)
        assert m.pattern_tag(tokens) == tag(" ".join(tokens), tokenize=False), text


# --------------------------------------------------------------------------------------------------
# Structural: sentence BLEU-4, exp smoothing, effective order


def test_structural_hand_computed_one_substitution() -> None:
    # ref e = the film has great actors today ; hyp e′ = the film has great music today
    # p1 = 5/6, p2 = 3/5 (the film, film has, has great), p3 = 2/4, p4 = 1/3; equal lengths: BP = 1
    # BLEU = (5/6 · 3/5 · 2/4 · 1/3)^(1/4) = (1/12)^(1/4) = 0.537284...
    value = compute_structural_consistency("The film has great actors today.",
                                           "The film has great music today.")
    assert value == pytest.approx((1 / 12) ** 0.25, abs=1e-12)


def test_structural_exp_smoothing_of_zero_matches() -> None:
    # ref = alpha beta gamma delta ; hyp = alpha gamma beta delta
    # 1-grams 4/4; no matching 2-, 3- or 4-grams. exp smoothing replaces the k-th zero precision by
    # 1/(2^k · total): p2 = 1/(2·3) = 1/6, p3 = 1/(4·2) = 1/8, p4 = 1/(8·1) = 1/8.
    # BLEU = (1 · 1/6 · 1/8 · 1/8)^(1/4) = (1/384)^(1/4) = 0.225979...
    value = compute_structural_consistency("alpha beta gamma delta", "alpha gamma beta delta")
    assert value == pytest.approx((1 / 384) ** 0.25, abs=1e-12)


def test_structural_brevity_penalty() -> None:
    # ref has 5 words, hyp its first 4: every precision is 1; BP = exp(1 − 5/4) = exp(−0.25) = 0.7788
    value = compute_structural_consistency("alpha beta gamma delta epsilon", "alpha beta gamma delta")
    assert value == pytest.approx(math.exp(-0.25), abs=1e-12)
    # The hypothesis longer than the reference: no penalty, but precisions drop (4/5, 3/4, 2/3, 1/2).
    longer = compute_structural_consistency("alpha beta gamma delta", "alpha beta gamma delta epsilon")
    assert longer == pytest.approx((4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25, abs=1e-12)


def test_structural_effective_order_on_short_texts() -> None:
    # ref = good film, hyp = good movie: p1 = 1/2; p2: 0 of 1 -> exp-smoothed 1/(2·1) = 1/2;
    # no 3- or 4-grams exist, so the effective order is 2: BLEU = (1/2 · 1/2)^(1/2) = 0.5
    assert compute_structural_consistency("good film", "good movie") == pytest.approx(0.5, abs=1e-12)
    assert compute_structural_consistency("good film", "good film") == pytest.approx(1.0)


def test_structural_is_asymmetric_e_is_the_reference() -> None:
    a, b = "alpha beta gamma delta epsilon", "alpha beta gamma delta"
    assert compute_structural_consistency(a, b) != compute_structural_consistency(b, a)


def test_structural_equals_sacrebleu_sentence_score(scorer: Scorer) -> None:
    # The cached-n-gram path must equal sacrebleu's own sentence_score on the same word tokens.
    rng = random.Random(3)
    small_vocab = ["a", "b", "c", "the", "of", "x"]  # many repeated n-grams exercise the clipping
    pairs = [(ORIGINAL, PERTURBED), (PERTURBED, ORIGINAL)]
    for _ in range(300):
        vocab = small_vocab if rng.random() < 0.5 else _VOCAB
        pairs.append((" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 40))),
                      " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 40)))))
    bleu = scorer._bleu
    for e, e_prime in pairs:
        expected = bleu.sentence_score(" ".join(word_tokens(e_prime)), [" ".join(word_tokens(e))]).score
        assert scorer.structural(e, e_prime) == pytest.approx(expected / 100, abs=1e-12), (e, e_prime)


# --------------------------------------------------------------------------------------------------
# Length


def test_length_hand_computed() -> None:
    # 5 words vs 8 words: 1 − |5 − 8| / max(5, 8) = 1 − 3/8 = 0.625 (punctuation is not counted)
    assert compute_length_stability("One two three four five.",
                                    "one, two, three, four, five, six, seven, eight") == 0.625
    assert compute_length_stability("one two", "three four") == 1.0


# --------------------------------------------------------------------------------------------------
# Combined ρ and PairScores


def test_combined_default_weights_hand_computed() -> None:
    e, e_prime = "The happy dog chased a red ball in the park.", "A happy cat watched the red bird."
    s = score_pair(e, e_prime)
    # ρ = 0.25·(semantic + keyword + structural + length)
    assert s.combined == pytest.approx(0.25 * (s.semantic + s.keyword + s.structural + s.length))
    assert s.keyword == pytest.approx(2 / 7)
    # e has 10 words, e′ 7: length = 1 − 3/10 = 0.7
    assert s.length == pytest.approx(0.7)
    # tf(e): the 2, happy, dog, chased, a, red, ball, in, park -> Σtf² = 4 + 8 = 12
    # tf(e′): a, happy, cat, watched, the, red, bird -> Σtf² = 7
    # dot: the 2·1 + happy 1 + a 1 + red 1 = 5 -> cos = 5/√84
    assert s.semantic == pytest.approx(5 / math.sqrt(84))


def test_combined_custom_weights() -> None:
    e, e_prime = "One two three four five.", "one two three four five six seven eight"
    base = score_pair(e, e_prime)
    only_length = score_pair(e, e_prime, weights={"semantic": 0, "keyword": 0, "structural": 0, "length": 1})
    assert only_length.combined == pytest.approx(0.625)
    mixed = score_pair(e, e_prime, weights=[0.4, 0.2, 0.2, 0.2])
    expected = 0.4 * base.semantic + 0.2 * base.keyword + 0.2 * base.structural + 0.2 * base.length
    assert mixed.combined == pytest.approx(expected)
    scorer = Scorer(weights=[0.4, 0.2, 0.2, 0.2])
    assert scorer.score(e, e_prime) == mixed
    assert scorer.weights == (0.4, 0.2, 0.2, 0.2)


def test_pair_scores_accessors() -> None:
    s = score_pair(ORIGINAL, PERTURBED)
    assert s.metric("semantic") == s.semantic and s.metric("combined") == s.combined
    with pytest.raises(KeyError, match="unknown metric 'bleu'"):
        s.metric("bleu")
    assert PairScores(**s.to_dict()) == s
    with pytest.raises(AttributeError):
        s.semantic = 1.0  # type: ignore[misc]


# --------------------------------------------------------------------------------------------------
# Bounds, identity, disjointness, determinism


def test_every_score_in_unit_interval_on_random_texts(scorer: Scorer) -> None:
    rng = random.Random(2024)
    for _ in range(400):
        s = scorer.score(_random_text(rng, rng.randint(1, 90)), _random_text(rng, rng.randint(1, 90)))
        for name in (*m.METRICS, "combined"):
            assert 0.0 <= s.metric(name) <= 1.0, (name, s)


@pytest.mark.parametrize("text", [ORIGINAL, PERTURBED, "Great film.", "Dune",
                                  "The happy dog chased a red ball in the park."])
def test_identical_texts_score_one_everywhere(text: str) -> None:
    s = score_pair(text, text)
    assert s.semantic == pytest.approx(1.0, abs=1e-12)
    assert s.keyword == 1.0
    assert s.structural >= 0.999
    assert s.length == 1.0
    assert s.combined >= 0.999
    assert not s.generation_failure and not s.keyword_empty


def test_disjoint_texts_score_zero_semantic_and_keyword() -> None:
    s = score_pair("Brilliant science fiction with striking visuals.",
                   "Quiet romantic comedies soothe old hearts.")
    assert s.semantic == 0.0
    assert s.keyword == 0.0
    assert s.structural == 0.0  # no shared unigram: sacrebleu's early exit gives 0
    assert s.combined == pytest.approx(0.25 * s.length)


def test_scores_are_deterministic_across_scorers() -> None:
    rng = random.Random(9)
    pairs = [(ORIGINAL, PERTURBED)] + [(_random_text(rng, 60), _random_text(rng, 60)) for _ in range(30)]
    first, second = Scorer(), Scorer(cache_size=1)
    assert [first.score(*p) for p in pairs] == [second.score(*p) for p in pairs]
    first.clear_cache()
    assert [first.score(*p) for p in pairs] == [second.score(*p) for p in pairs]


def test_realistic_pair_scores_are_moderate() -> None:
    s = score_pair(ORIGINAL, PERTURBED)
    assert 0.3 < s.semantic < 0.9
    assert 0.1 < s.keyword < 0.8
    assert 0.0 < s.structural < 0.3  # paraphrase: few shared 3-/4-grams
    assert s.length == pytest.approx(1 - (len(word_tokens(ORIGINAL)) - len(word_tokens(PERTURBED)))
                                     / len(word_tokens(ORIGINAL)))


# --------------------------------------------------------------------------------------------------
# Generation failures


@pytest.mark.parametrize("bad", ["", "   ", "\n\t \u00a0", "...", " !? "])
def test_empty_or_wordless_text_is_a_generation_failure(bad: str) -> None:
    for e, e_prime in ((bad, ORIGINAL), (ORIGINAL, bad), (bad, bad)):
        s = score_pair(e, e_prime)
        assert s == PairScores(0.0, 0.0, 0.0, 0.0, 0.0, generation_failure=True, keyword_empty=False)
        assert compute_semantic_sim(e, e_prime) == 0.0
        assert compute_keyword_stability(e, e_prime) == 0.0
        assert compute_structural_consistency(e, e_prime) == 0.0
        assert compute_length_stability(e, e_prime) == 0.0


def test_non_string_input_is_a_clear_type_error(scorer: Scorer) -> None:
    with pytest.raises(TypeError, match="e_prime must be a str"):
        scorer.score("fine text", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"e must be a str.*int"):
        score_pair(3, "fine text")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# Weights


def test_validate_weights_accepts_mapping_sequence_and_none() -> None:
    assert validate_weights(None) == (0.25, 0.25, 0.25, 0.25)
    assert validate_weights([0.4, 0.2, 0.2, 0.2]) == (0.4, 0.2, 0.2, 0.2)
    assert validate_weights((1, 0, 0, 0)) == (1.0, 0.0, 0.0, 0.0)
    mapping = {"length": 0.1, "structural": 0.2, "keyword": 0.3, "semantic": 0.4}
    assert validate_weights(mapping) == (0.4, 0.3, 0.2, 0.1)
    assert validate_weights(["0.25", "0.25", "0.25", "0.25"]) == (0.25, 0.25, 0.25, 0.25)
    # Within the 1e-6 tolerance.
    assert validate_weights([0.25, 0.25, 0.25, 0.25 + 5e-7]) == (0.25, 0.25, 0.25, 0.25 + 5e-7)
    assert validate_weights([1 / 3, 1 / 3, 1 / 3, 0]) == pytest.approx((1 / 3, 1 / 3, 1 / 3, 0))


@pytest.mark.parametrize(("weights", "message"), [
    ([0.5, 0.5, 0.5, -0.5], r"weight for 'length' must be a finite number ≥ 0, got -0\.5"),
    ([math.nan, 0.5, 0.25, 0.25], r"weight for 'semantic' must be a finite number ≥ 0, got nan"),
    ([math.inf, 0, 0, 0], r"weight for 'semantic' must be a finite number ≥ 0, got inf"),
    ([True, 0, 0, 0], r"weight for 'semantic' must be a number, got True"),
    ([0.25, "a lot", 0.25, 0.25], r"weight for 'keyword' must be a number, got 'a lot'"),
    ([0.25, 0.25, None, 0.25], r"weight for 'structural' must be a number, got None"),
    ([0.5, 0.5], r"expected 4 weights \(semantic, keyword, structural, length\), got 2"),
    ([0.3, 0.3, 0.3, 0.3], r"weights must sum to 1 \(within 1e-06\), got 1\.2 \(semantic=0\.3"),
    ([0.25, 0.25, 0.25, 0.25 + 2e-6], r"must sum to 1"),
    ({"semantic": 0.5, "keywords": 0.5}, r"unknown metric name\(s\) 'keywords'"),
    ({"semantic": 0.5, "keyword": 0.5}, r"missing weight\(s\) for structural, length"),
    (0.25, r"expected a mapping of metric name to weight or a sequence of 4 numbers, got float"),
    (".25,.25,.25,.25", r"got str"),
])
def test_validate_weights_errors_name_the_bad_value(weights: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_weights(weights)  # type: ignore[arg-type]


def test_validate_weights_error_names_its_origin() -> None:
    with pytest.raises(ConfigError, match=r"^--robustexplain-weights: weight for 'keyword'"):
        validate_weights([0.5, -1, 0.5, 1], origin="--robustexplain-weights")


def test_bad_weights_or_settings_fail_when_building_a_scorer() -> None:
    with pytest.raises(ConfigError, match="must sum to 1"):
        Scorer(weights=[1, 1, 1, 1])
    with pytest.raises(ConfigError, match="unknown keyword tagger 'spacy'"):
        Scorer(tagger="spacy")
    with pytest.raises(ConfigError, match="cache_size must be an integer ≥ 1, got 0"):
        Scorer(cache_size=0)
    with pytest.raises(ConfigError, match="must sum to 1"):
        score_pair("a b", "a b", weights=[0.5, 0.5, 0.5, 0.5])


# --------------------------------------------------------------------------------------------------
# Signature


def test_signature_names_tokenizer_tagger_bleu_weights_and_version() -> None:
    textblob_version = importlib.metadata.version("textblob")
    sacrebleu_version = importlib.metadata.version("sacrebleu")
    expected = (f"tok:nltk-regexp+chars|tag:textblob-pattern@{textblob_version}|"
                f"bleu:4,smooth:exp,eff:yes,sacrebleu@{sacrebleu_version}|w:.25/.25/.25/.25|v:{__version__}")
    assert metric_signature() == expected
    assert Scorer().signature == expected


def test_signature_changes_with_weights_and_tagger() -> None:
    assert "|w:.4/.2/.2/.2|" in metric_signature([0.4, 0.2, 0.2, 0.2])
    assert "|w:1/0/0/0|" in metric_signature({"semantic": 1, "keyword": 0, "structural": 0, "length": 0})
    assert "|w:.333333/.333333/.333333/0|" in metric_signature([1 / 3, 1 / 3, 1 / 3, 0])
    nltk_version = importlib.metadata.version("nltk")
    assert f"|tag:nltk-perceptron@{nltk_version}|" in metric_signature(tagger="nltk-perceptron")
    assert metric_signature([0.4, 0.2, 0.2, 0.2]) != metric_signature()
    assert Scorer(weights=[0.4, 0.2, 0.2, 0.2]).signature == metric_signature([0.4, 0.2, 0.2, 0.2])
    with pytest.raises(ConfigError, match="unknown keyword tagger"):
        metric_signature(tagger="perceptron")


# --------------------------------------------------------------------------------------------------
# The optional NLTK perceptron tagger


def test_perceptron_tagger_without_data_says_how_to_install(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: object) -> None:
    import nltk.data

    # An empty search path: the data is missing whatever this machine has installed.
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    with pytest.raises(ConfigError) as raised:
        Scorer(tagger="nltk-perceptron")
    message = str(raised.value)
    assert "python -m nltk.downloader averaged_perceptron_tagger_eng" in message
    assert "'nltk-perceptron'" in message and "'textblob'" in message


def _perceptron_data_installed() -> bool:
    import nltk.data

    try:
        nltk.data.find("taggers/averaged_perceptron_tagger_eng/")
    except LookupError:
        return False
    return True


def test_perceptron_tagger_scores_when_its_data_is_installed() -> None:
    if not _perceptron_data_installed():
        pytest.skip("NLTK averaged_perceptron_tagger_eng data is not installed here")
    scorer = Scorer(tagger="nltk-perceptron")
    assert scorer.keywords("The happy dog chased a red ball.") >= {"dog", "ball"}
    assert scorer.signature.startswith("tok:nltk-regexp+chars|tag:nltk-perceptron@")


# --------------------------------------------------------------------------------------------------
# Cache


@pytest.fixture
def tag_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Records every call of the Pattern tagger (the texts it was given), patched where the taggers look it
    up (``metrics.text``)."""
    from pytest_robustexplain.metrics import text

    calls: list[list[str]] = []
    real = text.pattern_tag

    def counting(tokens: list[str]) -> list[tuple[str, str]]:
        calls.append(list(tokens))
        return real(tokens)

    monkeypatch.setattr(text, "pattern_tag", counting)
    return calls


def test_scorer_tags_each_distinct_text_once(tag_calls: list[list[str]]) -> None:
    scorer = Scorer()
    rng = random.Random(1)
    perturbed = [f"{PERTURBED} {_random_text(rng, 5)}" for _ in range(25)]
    for text in perturbed:
        scorer.score(ORIGINAL, text)
    # 1 original + 25 perturbed texts, each tagged once although the original took part in 25 pairs.
    assert len(tag_calls) == 26
    for text in perturbed[:5]:  # scoring again tags nothing
        scorer.score(ORIGINAL, text)
        scorer.score(text, ORIGINAL)
    assert len(tag_calls) == 26
    info = scorer.cache_info()
    assert (info.misses, info.size) == (26, 26)
    assert info.hits == 2 * 25 + 4 * 5 - 26  # 70 lookups, 26 of them misses


def test_cache_is_bounded_lru(tag_calls: list[list[str]]) -> None:
    scorer = Scorer(cache_size=2)
    a, b, c = "A red film.", "A blue film.", "A green film."
    scorer.score(a, b)  # tags a, b
    scorer.score(a, c)  # a hit (most recent); c evicts b
    assert len(tag_calls) == 3 and scorer.cache_info().size == 2
    scorer.score(a, c)  # both cached
    assert len(tag_calls) == 3
    scorer.score(a, b)  # b was evicted: tagged again
    assert len(tag_calls) == 4


def test_failures_are_not_tagged_or_cached(tag_calls: list[list[str]]) -> None:
    scorer = Scorer()
    scorer.score("", "   ")
    assert tag_calls == [] and scorer.cache_info().size == 0


def test_scorer_is_thread_safe(tag_calls: list[list[str]]) -> None:
    scorer = Scorer()
    rng = random.Random(4)
    pairs = [(ORIGINAL, _random_text(rng, 40)) for _ in range(40)]
    expected = [Scorer().score(*p) for p in pairs]
    tag_calls.clear()
    results: dict[int, list[PairScores]] = {}

    def work(worker: int) -> None:
        results[worker] = [scorer.score(*p) for p in pairs]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(results[i] == expected for i in range(4))
    assert len(tag_calls) == len({text for pair in pairs for text in pair})


# --------------------------------------------------------------------------------------------------
# Import cost


def test_importing_metrics_does_not_import_heavy_modules() -> None:
    heavy = "('nltk', 'textblob', 'sacrebleu', 'numpy', 'regex')"
    code = ("import sys, pytest_robustexplain.metrics as m; m.metric_signature(); m.validate_weights(None); "
            f"print(sorted(n for n in {heavy} if n in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
