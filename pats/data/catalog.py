"""The data sets `pats data fetch` knows: each file's place under the data root, its sha256 and size,
and the public source it comes from, pinned to a commit.

The layout under the data root is that of the project's own data folder (see its SOURCES.md), and a
mirror (`--mirror URL`) serves the same layout. Files are taken verbatim from the public repositories,
so one sha256 holds for both. ALFWorld's two tarballs are the exception: they were packed from the game
files of a public repository, so from the public source `pats data fetch alfworld` downloads that
repository at its commit, keeps the 3,893 game files (`game.tw-pddl` of three splits) and checks them against one digest of the tree
(`tree_digest`), not the tarballs' sha256.
"""

from __future__ import annotations

from dataclasses import dataclass

RAW = "https://raw.githubusercontent.com"


@dataclass(frozen=True)
class DataFile:
    path: str  # under the data root, and under a mirror
    sha256: str
    size: int  # bytes
    url: str | None  # the public source at a pinned commit; None when only `Dataset.archive` has it


@dataclass(frozen=True)
class GameArchive:
    """A public repository archive whose files under `members` make a folder of the data root."""

    url: str
    folder: str  # the folder inside the archive (below its top folder) that goes to `path`, e.g. json_2.1.1
    keep: tuple[str, ...]  # fnmatch patterns of the files kept from it (paths from the archive's top)
    path: str  # where that folder goes under the data root
    files: int
    size: int  # bytes once unpacked
    tree_sha256: str  # `tree_digest` of the kept folder


@dataclass(frozen=True)
class Dataset:
    name: str
    about: str
    files: tuple[DataFile, ...]
    archive: GameArchive | None = None  # the public source when the files themselves have none

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


AGENTIC_RAG = f"{RAW}/chenyiqun/Agentic-RAG/a6694e2ebfa1a3fcbbbe4a5607f6317ba70ddc40/data"
GRAPHRAG_R2 = f"{RAW}/wjqii/graphrag-r2/a90914b6e18e2d99cc8bd2be3dfebcda43036977/data"
FLASHRAG = f"{RAW}/RUC-NLPIR/FlashRAG"
SKILLRL = f"{RAW}/aiming-lab/SkillRL/48c8446f5993e96b65c696a78b930b6a53084981/memory_data"
ALFWORLD_REPO = (
    "https://github.com/jiangmin8/lz-tool-skillopt/archive/76b659f30553611066647d477cf72198fed3ef3d.tar.gz"
)

DATASETS = (
    Dataset(
        "alfworld",
        "ALFWorld's TextWorld-PDDL games, json_2.1.1: train 3553, valid_train 200, valid_seen 140 games",
        (
            DataFile(
                "alfworld/json_2.1.1_train_validseen.tar.xz",
                "c5ef1231d5cd271f247da8af93f0259554d03452ea16b94c7a2c0a18d86d3ca6",
                6078796,
                None,
            ),
            DataFile(
                "alfworld/json_2.1.1_valid_seen.tar.xz",
                "a53d16ec4825f2c090c990c0d3f2276f7aa817265974e13166af9bc8ff19862c",
                271624,
                None,
            ),
        ),
        GameArchive(
            ALFWORLD_REPO,
            "json_2.1.1",
            tuple(f"json_2.1.1/{split}/*/*/game.tw-pddl" for split in ("train", "valid_train", "valid_seen")),
            "alfworld/json_2.1.1",
            3893,
            332416329,
            "19cd55b5dba54f9683dff9b983071b4e3a4f2f951cf064891db5e23a102abd7c",
        ),
    ),
    Dataset(
        "search_qa",
        "Search-R1's QA test splits (NQ, HotpotQA, MuSiQue, 2Wiki), 800 PopQA training questions and "
        "a 1000-passage wiki-18 sample for the bm25 retriever",
        (
            DataFile(
                "qa/agentic_rag/nq/test.jsonl",
                "f558762305935aa2987504d6aff8497c0d7bb4692a4c28522b11eb9129b4643f",
                1357766,
                f"{AGENTIC_RAG}/nq/test.jsonl",
            ),
            DataFile(
                "qa/agentic_rag/hotpot_qa/test.jsonl",
                "18bb8bf91126102d462fce00aa901d24b3d28d4c8cf47c0507ae5cae89d833f1",
                3174508,
                f"{AGENTIC_RAG}/hotpot_qa/test.jsonl",
            ),
            DataFile(
                "qa/agentic_rag/musique/test.jsonl",
                "06cff2b49f55bf2e6a653ebfde0bd1c2b453ad5cd33d645c3fba1fbe39afb7a4",
                1080764,
                f"{AGENTIC_RAG}/musique/test.jsonl",
            ),
            DataFile(
                "qa/agentic_rag/2wikimultihop_qa/test.parquet",
                "bba8af831300b52bd4cb2c34721098494685c5fce2e480a81fe85f0a15072972",
                1437980,
                f"{AGENTIC_RAG}/2wikimultihop_qa/test.parquet",
            ),
            DataFile(
                "qa/agentic_rag/2wikimultihop_qa/2wikimultihop_test_questions_and_answers.json",
                "85cbe1019b2bd96ca2c0790711fefa47bfa5a564fe881bcf39017dd09e9a9e8d",
                1458596,
                f"{AGENTIC_RAG}/2wikimultihop_qa/2wikimultihop_test_questions_and_answers.json",
            ),
            DataFile(
                "qa/graphrag_r2/popqa/train.parquet",
                "b95867e96b1cc2f2647792c78b8de244f8a8ed6f9126f7b867a3772629b9c577",
                81094,
                f"{GRAPHRAG_R2}/popqa/train.parquet",
            ),
            DataFile(
                "corpus/flashrag_wiki18_sample_1000.jsonl",
                "4ff49380c38844c413c5d022e9c269b21a00726130f561b518600f2beb7cc6ed",
                677910,
                f"{FLASHRAG}/adb2a8bc285042abf7c0c56ff004283f62318c5a/examples/quick_start/indexes/sample_data.jsonl",
            ),
            DataFile(
                "corpus/flashrag_nq_sample17.jsonl",
                "805b1349d4bda37fb81c55067918bb4fd0565154cb0fe0956077479799f49f50",
                2444,
                f"{FLASHRAG}/1ee524901aa3daf009f97b7a31e7a1b58eee8206/examples/quick_start/dataset/nq/test.jsonl",
            ),
        ),
    ),
    Dataset(
        "skillrl",
        "SkillRL's initial skill banks for alfworld, webshop and search (the static and grow baselines)",
        (
            DataFile(
                "skill_banks/skillrl/alfworld.json",
                "e8a953beac1809591fadf0d3509db5dea6e66b0fb56ddb573cf30e6d8879e909",
                22594,
                f"{SKILLRL}/alfworld/claude_style_skills.json",
            ),
            DataFile(
                "skill_banks/skillrl/webshop.json",
                "79c6c60b6757b6b730e7471b537781936ce0e9cdbd8df6188b57c535893aec20",
                26311,
                f"{SKILLRL}/webshop/claude_style_skills.json",
            ),
            DataFile(
                "skill_banks/skillrl/search.json",
                "df42af6cb2e31d80bd56631ff240bda9efb3bc4f8b9e8736284e5ab63f04d975",
                17338,
                f"{SKILLRL}/search/claude_style_skills_search.json",
            ),
        ),
    ),
)
BY_NAME = {d.name: d for d in DATASETS}


def dataset_of(relative: str) -> Dataset | None:
    """The data set a path under the data root belongs to (a file of it, or a folder holding its files)."""
    relative = relative.strip("/")
    for dataset in DATASETS:
        for f in dataset.files:
            if f.path == relative or f.path.startswith(relative + "/"):
                return dataset
    return None
