"""Routing card tokens to the txscore shard that owns them (docs/scaling-out.md).

The owner of a card is the shard with the highest weight for its card token, where

    weight(shard, token) = first 8 bytes of SHA-256(shard_name + "\\n" + token), big-endian

(rendezvous hashing; ties go to the smaller name): the function service/shard_map.h computes
in C++. A caller that sends card tokens can send each transaction straight to its owner with
ShardedClient; one that sends card numbers may send to any replica, which forwards it.

    from txscore_shards import ShardedClient
    client = ShardedClient({"txscore-0": ("10.0.0.1", 9090), "txscore-1": ("10.0.0.2", 9090)},
                           connect=my_connect)  # connect(host, port) -> a TxScore.Client
    result = client.score(transaction)          # transaction.card_token set

Needs only the Python standard library; the Thrift bindings come from `thrift --gen py` of
schemas/txscore.thrift, through `connect`.
"""
import hashlib


def shard_weight(shard_name, card_token):
    digest = hashlib.sha256((shard_name + "\n" + card_token).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def shard_owner(card_token, shard_names):
    """The name of the shard among `shard_names` that owns `card_token`."""
    if not shard_names:
        raise ValueError("a shard set needs at least one shard")
    return max(sorted(shard_names), key=lambda name: shard_weight(name, card_token))


class ShardedClient:
    """Sends each transaction to the shard that owns its card_token, on one connection per shard
    opened on first use. `shards`: name -> (host, port); `connect(host, port)` returns an open
    TxScore.Client (with TLS and a client certificate where the shards serve it)."""

    def __init__(self, shards, connect):
        self.shards = dict(shards)
        self.connect = connect
        self.clients = {}

    def owner(self, card_token):
        return shard_owner(card_token, list(self.shards))

    def client_for(self, card_token):
        name = self.owner(card_token)
        if name not in self.clients:
            host, port = self.shards[name]
            self.clients[name] = self.connect(host, port)
        return self.clients[name]

    def score(self, transaction):
        """The owner's answer. Raises ShardDown when the owner cannot be reached (score
        unavailable: retry later or fall back); the next call connects again."""
        if not transaction.card_token:
            raise ValueError("ShardedClient routes by card_token; send card numbers to any replica instead")
        name = self.owner(transaction.card_token)
        try:
            return self.client_for(transaction.card_token).score(transaction)
        except (OSError, EOFError) as error:
            self.clients.pop(name, None)
            raise ShardDown(name, str(error)) from error
        except Exception as error:  # Thrift's transport errors (TTransportException)
            if type(error).__name__ != "TTransportException":
                raise
            self.clients.pop(name, None)
            raise ShardDown(name, str(error)) from error


class ShardDown(Exception):
    """The shard that owns the card could not be reached: no score (as the server's
    ShardUnavailable)."""

    def __init__(self, shard, reason):
        super().__init__(f"shard {shard} is unavailable: {reason}")
        self.shard = shard
        self.reason = reason
