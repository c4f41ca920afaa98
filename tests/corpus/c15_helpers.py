"""Helpers imported by c15_helper_module.py."""


def make_language_filter(languages):
    keep = frozenset(languages)

    def is_kept(example):
        return example["lang"] in keep

    return is_kept
