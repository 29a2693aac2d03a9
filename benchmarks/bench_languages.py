"""What the paper's four metrics say about explanations in other languages, on pairs written by hand.

For each language, one explanation of the same recommendation (a science-fiction film for a user who rated
two such films highly), scored with ``score_pair`` against: the same text with one word changed (one
character in the scripts written without spaces), a faithful paraphrase, and an unrelated product blurb. An
English-like metric scores the one-word change high, the paraphrase in between and the unrelated text low,
and the three in the same places in every language. The last columns say how much of each explanation the
keyword tagger can read: the share of its letters in Latin script, the script of the others, and whether
the reports flag its keyword scores (``metrics.tagger_reads``: at least half its letters Latin).

    .venv/bin/python benchmarks/bench_languages.py
"""

from __future__ import annotations

from pytest_robustexplain.metrics import latin_share, score_pair, script_of, tagger_reads

# language: (explanation, one word or character changed, paraphrase, unrelated)
PAIRS: dict[str, tuple[str, str, str, str]] = {
    "English": (
        "You often watch science fiction and thriller films, and you rated The Matrix and Inception highly. "
        "Interstellar fits that taste with its mind-bending plot and strong visuals.",
        "You often watch science fiction and thriller films, and you rated The Matrix and Inception highly. "
        "Interstellar fits that taste with its mind-bending plot and striking visuals.",
        "Since you enjoy sci-fi and thrillers and gave The Matrix and Inception high ratings, Interstellar, "
        "with its twisting story and great visuals, suits you.",
        "This blender has five speeds and a glass jar; it is easy to clean and comes with a two-year "
        "warranty."),
    "German": (
        "Du schaust oft Science-Fiction- und Thrillerfilme und hast Matrix und Inception hoch bewertet. "
        "Interstellar passt mit seiner verschachtelten Handlung und starken Bildern zu deinem Geschmack.",
        "Du schaust oft Science-Fiction- und Thrillerfilme und hast Matrix und Inception hoch bewertet. "
        "Interstellar passt mit seiner verschachtelten Handlung und beeindruckenden Bildern zu deinem "
        "Geschmack.",
        "Weil du Sci-Fi und Thriller magst und Matrix sowie Inception gute Noten gegeben hast, ist "
        "Interstellar mit seiner komplexen Geschichte und großartigen Optik das Richtige für dich.",
        "Dieser Mixer hat fünf Geschwindigkeiten und einen Glasbehälter, lässt sich leicht reinigen und hat "
        "zwei Jahre Garantie."),
    "Chinese": (
        "你经常看科幻和惊悚电影，并且给《黑客帝国》和《盗梦空间》打了高分。《星际穿越》情节烧脑、画面震撼，符合你的口味。",
        "你常常看科幻和惊悚电影，并且给《黑客帝国》和《盗梦空间》打了高分。《星际穿越》情节烧脑、画面震撼，符合你的口味。",
        "因为你喜欢科幻片和惊悚片，还给《黑客帝国》和《盗梦空间》很高的评价，所以剧情复杂、视觉效果出色的《星际穿越》很适合你。",
        "这台搅拌机有五档速度和玻璃杯，清洗方便，并提供两年保修。"),
    "Japanese": (
        "あなたはよくSF映画やスリラー映画を観て、『マトリックス』と『インセプション』を高く評価しました。"
        "『インターステラー』は複雑な物語と迫力ある映像で、あなたの好みに合います。",
        "あなたはよくSF映画やスリラー映画を観て、『マトリックス』と『インセプション』を高く評価しました。"
        "『インターステラー』は複雑な物語と魅力ある映像で、あなたの好みに合います。",
        "SFやスリラーが好きで、『マトリックス』や『インセプション』に高評価を付けたので、ストーリーが奥深く映像も"
        "素晴らしい『インターステラー』がおすすめです。",
        "このミキサーは5段階の速度とガラス容器を備え、洗いやすく、2年間の保証が付いています。"),
    "Thai": (
        "คุณชอบดูภาพยนตร์ไซไฟและระทึกขวัญ และให้คะแนนเดอะเมทริกซ์และอินเซ็ปชันสูง "
        "อินเตอร์สเตลลาร์มีเนื้อเรื่องซับซ้อนและภาพสวยงาม จึงเหมาะกับรสนิยมของคุณ",
        "คุณชอบดูภาพยนตร์ไซไฟและระทึกขวัญ และให้คะแนนเดอะเมทริกซ์และอินเซ็ปชันสูง "
        "อินเตอร์สเตลลาร์มีเนื้อเรื่องซับซ้อนและภาพงดงาม จึงเหมาะกับรสนิยมของคุณ",
        "เพราะคุณชื่นชอบหนังไซไฟและหนังระทึกขวัญ และให้คะแนนสูงกับเดอะเมทริกซ์และอินเซ็ปชัน "
        "อินเตอร์สเตลลาร์ที่มีเรื่องราวลึกซึ้งและภาพยอดเยี่ยมจึงเหมาะกับคุณ",
        "เครื่องปั่นนี้มีความเร็วห้าระดับและโถแก้ว ทำความสะอาดง่าย และมีการรับประกันสองปี"),
    "Arabic": (
        "أنت تشاهد أفلام الخيال العلمي والإثارة كثيرا، وقد قيمت ماتريكس وإنسبشن تقييما عاليا. فيلم إنترستيلر "
        "يناسب ذوقك بقصته المعقدة ومشاهده المبهرة.",
        "أنت تشاهد أفلام الخيال العلمي والإثارة كثيرا، وقد قيمت ماتريكس وإنسبشن تقييما عاليا. فيلم إنترستيلر "
        "يناسب ذوقك بقصته المعقدة ومشاهده الرائعة.",
        "بما أنك تحب أفلام الخيال العلمي والتشويق ومنحت ماتريكس وإنسبشن درجات عالية، فإن إنترستيلر بحبكته "
        "العميقة وصوره الجميلة مناسب لك.",
        "تحتوي هذه الخلاطة على خمس سرعات ووعاء زجاجي، وهي سهلة التنظيف ومضمونة لمدة عامين."),
}
PAIR_NAMES = ("one change", "paraphrase", "unrelated")


def main() -> None:
    print("ρ (semantic / keyword / structural / length) of each explanation against its three partners")
    print(f"{'language':<10}" + "".join(f"{name:>34}" for name in PAIR_NAMES)
          + f"{'Latin':>7}{'script':>10}{'reads':>7}")
    for language, (text, *others) in PAIRS.items():
        cells = []
        for other in others:
            s = score_pair(text, other)
            cells.append(f"{s.combined:.2f} ({s.semantic:.2f}/{s.keyword:.2f}/{s.structural:.2f}/"
                         f"{s.length:.2f})")
        print(f"{language:<10}" + "".join(f"{c:>34}" for c in cells)
              + f"{100 * latin_share(text):>6.0f}%{script_of(text) or '-':>10}"
              + f"{'yes' if tagger_reads(text) else 'no':>7}")
    emoji = score_pair("🎬🚀✨👍", "🎬🚀✨👌")
    print(f"emoji only: ρ {emoji.combined:.2f}, generation failure {emoji.generation_failure} (no word to "
          "score: the pair counts as a failed reply)")


if __name__ == "__main__":
    main()
