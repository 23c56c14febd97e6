"""Recall and compaction: embeddings, semantic recall, working memory, observations.

Pure decisions live in ``fleet.domain.recall``; this room holds the embedders, the recall
search over the store, the working-memory tool and the observer.
"""
