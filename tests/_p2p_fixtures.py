"""The p2p tests' text fixtures (tests/fixtures/p2p/, see its README)."""
import os

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "p2p")


def fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()
