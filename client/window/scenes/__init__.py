"""The window's screens, one scene per screen: the menu, the BLINK table and the match results."""
