"""The synthetic e-commerce dataset of the paper (§4.1), fully determined by its seed."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from ..errors import ConfigError
from .datasets import check_count
from .records import Catalog, Dataset, EvalCase, Interaction, Item, UserHistory
from .seeded import DEFAULT_SEED, STREAM_CASES, STREAM_ITEMS, STREAM_USERS, Rand


class _CategoryVocabulary(NamedTuple):
    products: tuple[str, ...]
    brands: tuple[str, ...]
    attributes: tuple[str, ...]
    median_price: float
    price_spread: float  # sd of log(price)


_NAME_WORDS: tuple[str, ...] = (
    "Aurora", "Nimbus", "Vertex", "Solace", "Ember", "Lumen", "Nova", "Summit", "Harbor", "Cedar", "Echo",
    "Zephyr", "Atlas", "Willow", "Orbit", "Maple", "Crest", "Halo", "Tidal", "Sierra", "Juniper", "Cobalt",
    "Meadow", "Pulse",
)

SYNTHETIC_CATEGORIES: Mapping[str, _CategoryVocabulary] = MappingProxyType({
    "Electronics": _CategoryVocabulary(
        ("Wireless Earbuds", "Bluetooth Speaker", "Smartwatch", "Noise-Cancelling Headphones",
         "Portable Charger", "Mechanical Keyboard", "USB-C Hub", "4K Webcam", "E-Reader", "Fitness Tracker",
         "Wireless Mouse", "Soundbar"),
        ("Voltix", "Sonora", "Kestrel Labs", "Pixelwave", "Arcline"),
        ("bluetooth 5.3", "fast charging", "water-resistant", "active noise cancelling", "30-hour battery",
         "USB-C", "compact design", "voice assistant support", "aluminium body", "wireless charging"),
        79.0, 0.6),
    "Fashion": _CategoryVocabulary(
        ("Denim Jacket", "Linen Shirt", "Leather Belt", "Wool Scarf", "Running Sneakers", "Chino Trousers",
         "Silk Blouse", "Rain Coat", "Knit Sweater", "Canvas Tote", "Ankle Boots", "Sunglasses"),
        ("Maison Vela", "Norththread", "Atelier Rue", "Kindred Cloth", "Sable & Co"),
        ("organic cotton", "slim fit", "water-repellent", "machine washable", "recycled materials", "unisex",
         "breathable", "handmade", "limited edition", "vegan leather"),
        55.0, 0.5),
    "Home": _CategoryVocabulary(
        ("Ceramic Vase", "Table Lamp", "Throw Blanket", "Cast Iron Skillet", "French Press", "Scented Candle",
         "Storage Basket", "Wall Clock", "Bamboo Cutting Board", "Linen Duvet Cover", "Air Purifier",
         "Spice Rack"),
        ("Hearthly", "Oakmere", "Casa Lumen", "Nestwell", "Fernhouse"),
        ("dishwasher safe", "handcrafted", "energy efficient", "sustainable wood", "minimalist design",
         "easy to clean", "space saving", "non-toxic", "heat resistant", "set of two"),
        45.0, 0.6),
    "Beauty": _CategoryVocabulary(
        ("Hydrating Serum", "Vitamin C Cream", "Clay Face Mask", "Lip Balm Set", "Hair Repair Oil",
         "Mineral Sunscreen", "Eau de Parfum", "Night Cream", "Exfoliating Scrub", "Makeup Brush Set",
         "Micellar Water", "Eyeshadow Palette"),
        ("Lumiere Botanics", "Dewpoint", "Velvet Fern", "Pura Skin", "Solstice Labs"),
        ("fragrance-free", "vegan", "cruelty-free", "for sensitive skin", "SPF 50", "hyaluronic acid",
         "dermatologist tested", "paraben-free", "travel size", "refillable"),
        28.0, 0.5),
    "Sports": _CategoryVocabulary(
        ("Yoga Mat", "Trail Running Shoes", "Resistance Bands", "Cycling Helmet", "Insulated Water Bottle",
         "Tennis Racket", "Hiking Backpack", "Adjustable Dumbbells", "Jump Rope", "Foam Roller",
         "Swim Goggles", "Camping Tent"),
        ("Peakform", "Stridewell", "Ridgeline", "Tempo Athletics", "Bluefin Outdoors"),
        ("lightweight", "non-slip", "breathable mesh", "adjustable", "waterproof", "shock absorbing",
         "foldable", "high-density foam", "reflective details", "quick-dry"),
        45.0, 0.7),
    "Books": _CategoryVocabulary(
        ("Mystery Novel", "Cookbook", "Travel Guide", "Science Fiction Saga", "Biography",
         "Poetry Collection", "Fantasy Epic", "History of Science", "Self-Help Guide", "Graphic Novel",
         "Thriller", "Short Story Collection"),
        ("Quillstone Press", "Harbor House Books", "Lantern Publishing", "Wrenfield", "Northlight Editions"),
        ("hardcover", "paperback", "bestseller", "illustrated", "award-winning", "first edition",
         "large print", "annotated", "400 pages", "book club pick"),
        18.0, 0.4),
    "Toys": _CategoryVocabulary(
        ("Building Blocks Set", "Plush Bear", "Remote Control Car", "Jigsaw Puzzle", "Wooden Train Set",
         "Science Kit", "Board Game", "Art and Craft Kit", "Dollhouse", "Marble Run", "Stunt Kite",
         "Magnetic Tiles"),
        ("Brightbloom", "Tinker Tales", "Pebble & Pine", "Wonderloop", "Jolly Otter"),
        ("ages 3+", "collectible", "STEM learning", "non-toxic paint", "battery operated", "educational",
         "eco-friendly", "award-winning design", "family game", "wooden"),
        32.0, 0.5),
})
"""The paper's seven categories, each with the words its synthetic titles and features are made of."""

_SYNTHETIC_START = 1704067200  # 2024-01-01T00:00:00Z
_HOUR, _DAY = 3600, 86400


def generate_synthetic(seed: int = DEFAULT_SEED, *, n_items: int = 200, n_users: int = 100, n_cases: int = 20,
                       min_len: int = 10, max_len: int = 50) -> Dataset:
    """The synthetic e-commerce dataset of the paper, fully determined by ``seed``.

    ``n_items`` items spread evenly over the seven categories of :data:`SYNTHETIC_CATEGORIES`, each with a
    title ("Aurora Wireless Earbuds"), a brand, a price and a few attributes. ``n_users`` users with
    ``min_len``–``max_len`` interactions of distinct items; each user prefers one or two *dominant*
    categories, which hold more interactions than any other category and get higher ratings (1–5 in half
    steps). Timestamps start in 2024 and increase strictly, with log-normal gaps of hours to weeks.
    ``n_cases`` sampled users each get a case: an item of a dominant category they have not interacted
    with. Items are ``I001``…, users ``U001``…; ids carry no category, so hiding a category hides it.
    """
    check_count(n_items, "n_items", len(SYNTHETIC_CATEGORIES) * 2)
    check_count(n_users, "n_users")
    check_count(n_cases, "n_cases")
    check_count(min_len, "min_len")
    check_count(max_len, "max_len", min_len)
    if n_cases > n_users:
        raise ConfigError(f"n_cases={n_cases} is more than n_users={n_users}")
    items = _synthetic_items(Rand(seed, STREAM_ITEMS), n_items)
    catalog = Catalog(sorted(items, key=lambda item: item.item_id))
    by_category = {c: catalog.by_category(c) for c in SYNTHETIC_CATEGORIES}
    quality = _item_quality(catalog, Rand(seed, STREAM_ITEMS + 100))
    rand = Rand(seed, STREAM_USERS)
    histories: dict[str, UserHistory] = {}
    preferred: dict[str, tuple[str, ...]] = {}
    width = max(3, len(str(n_users)))
    for number in range(1, n_users + 1):
        user_id = f"U{number:0{width}d}"
        length = rand.integer(min_len, max_len)
        dominant = tuple(rand.sample(SYNTHETIC_CATEGORIES, rand.integer(1, 2 if length > 1 else 1)))
        histories[user_id] = _synthetic_history(user_id, dominant, length, by_category, quality, rand)
        preferred[user_id] = dominant
    cases = _synthetic_cases(histories, preferred, by_category, n_cases, Rand(seed, STREAM_CASES))
    return Dataset(catalog=catalog, histories=MappingProxyType(histories), cases=cases,
                   name=f"synthetic(seed={seed})")


@functools.cache
def default_dataset() -> Dataset:
    """The default synthetic dataset (seed 2601), built once per process; it is the committed fixture."""
    return generate_synthetic()


def _synthetic_items(rand: Rand, n_items: int) -> list[Item]:
    categories = list(SYNTHETIC_CATEGORIES)
    base, extra = divmod(n_items, len(categories))
    per_category = [base + (i < extra) for i in range(len(categories))]
    width = max(3, len(str(n_items)))
    # Shuffled ids: I001 is not always Electronics, so an id never gives the category away.
    ids = rand.sample([f"I{n:0{width}d}" for n in range(1, n_items + 1)], n_items)
    items = []
    for category, count in zip(categories, per_category, strict=True):
        vocabulary = SYNTHETIC_CATEGORIES[category]
        pairs = [(name, product) for name in _NAME_WORDS for product in vocabulary.products]
        for name, product in rand.sample(pairs, count):  # distinct titles within a category
            price = math.exp(rand.normal(math.log(vocabulary.median_price), vocabulary.price_spread))
            features = {
                "brand": rand.choice(vocabulary.brands),
                "price": round(max(2.0, float(round(price))) - 0.01, 2),  # shop prices: 79 -> 78.99
                "attributes": rand.sample(vocabulary.attributes, rand.integer(2, 3)),
            }
            items.append(Item(ids.pop(), title=f"{name} {product}", category=category, features=features))
    return items


def _item_quality(catalog: Catalog, rand: Rand) -> dict[str, float]:
    """A per-item rating offset: some products are simply better liked than others."""
    return {item_id: rand.normal(0.0, 0.35) for item_id in catalog}


def _category_counts(dominant: tuple[str, ...], length: int, sizes: Mapping[str, int],
                     rand: Rand) -> dict[str, int]:
    """How many interactions fall in each category: dominant ones strictly ahead of every other one."""
    low, high = (0.5, 0.75) if len(dominant) == 1 else (0.6, 0.85)
    capacity = {c: sizes[c] - 1 for c in dominant}  # keep an unseen item per dominant category for a case
    in_dominant = min(max(round(length * rand.uniform(low, high)), len(dominant)), length)
    counts = dict.fromkeys(SYNTHETIC_CATEGORIES, 0)
    for i, category in enumerate(dominant):
        share = in_dominant // len(dominant) + (i < in_dominant % len(dominant))
        counts[category] = min(share, capacity[category])
    others = [c for c in SYNTHETIC_CATEGORIES if c not in dominant]
    for _ in range(length - sum(counts.values())):
        ceiling = min(counts[c] for c in dominant) - 1
        open_ = [c for c in others if counts[c] < min(ceiling, sizes[c])]
        if open_:
            counts[rand.choice(open_)] += 1
            continue
        # No other category may grow without catching up with a dominant one: grow a dominant one.
        room = [c for c in dominant if counts[c] < capacity[c]]
        if not room:
            raise ConfigError(f"cannot fit {length} distinct items into one history with "
                              f"{sum(sizes.values())} items; raise n_items or lower max_len")
        counts[min(room, key=lambda c: counts[c])] += 1
    return counts


def _synthetic_history(user_id: str, dominant: tuple[str, ...], length: int,
                       by_category: Mapping[str, tuple[Item, ...]], quality: Mapping[str, float],
                       rand: Rand) -> UserHistory:
    counts = _category_counts(dominant, length, {c: len(v) for c, v in by_category.items()}, rand)
    picks = {c: rand.sample(by_category[c], n) for c, n in counts.items() if n}
    sequence = rand.sample([c for c, n in counts.items() for _ in range(n)], length)
    timestamp = _SYNTHETIC_START + rand.integer(0, 90 * _DAY)
    interactions = []
    for category in sequence:
        item = picks[category].pop()
        liked = category in dominant
        score = rand.normal(4.2 if liked else 3.0, 0.6 if liked else 0.85) + quality[item.item_id]
        rating = min(5.0, max(1.0, round(score * 2) / 2))
        interactions.append(Interaction(item.item_id, category=category, timestamp=timestamp, rating=rating,
                                        title=item.title))
        # Log-normal gaps, median about a day and a half: mostly hours to days, now and then weeks.
        gap = math.exp(rand.normal(math.log(1.5 * _DAY), 1.2))
        timestamp += int(min(max(gap, _HOUR), 42 * _DAY))
    return UserHistory(user_id, tuple(interactions))


def _synthetic_cases(histories: Mapping[str, UserHistory], preferred: Mapping[str, tuple[str, ...]],
                     by_category: Mapping[str, tuple[Item, ...]], n_cases: int,
                     rand: Rand) -> tuple[EvalCase, ...]:
    users = list(histories)
    chosen = sorted(rand.sample(range(len(users)), n_cases))
    cases = []
    for index in chosen:
        history = histories[users[index]]
        seen = set(history.item_ids)
        category = rand.choice(preferred[history.user_id])
        unseen = [item for item in by_category[category] if item.item_id not in seen]
        cases.append(EvalCase(history, rand.choice(unseen)))  # never empty: _category_counts keeps one
    return tuple(cases)
