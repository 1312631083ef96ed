# bench/verdict.jq - what bench/*'s tables share (jq -L bench, include "verdict").
#
# The rule of every bench JSON: a ratio, and any figure a goal is compared
# with, is stored unrounded; a table prints a ratio with 3 decimals
# (fixed(3)) and decides each verdict on the stored, unrounded figure.  A
# ratio rounded before its comparison once read "1.15 ... met" for 716 /
# 621 = 1.153 against a goal of 1.15.  So a 1.150 printed beside a goal
# of 1.15 can read "NOT met": it is 1.1502, say.

# fixed(n): a number as a string with exactly n decimals (1.153 -> "1.153",
# 2 -> "2.000"); anything else as tostring ("null" for a missing figure)
def fixed($n):
	if type != "number" then tostring
	else pow(10; $n) as $p | (. * $p | round) as $i
		| ((if $i < 0 then -$i else $i end) + 0) as $a
		| (($a % $p) | tostring) as $f
		| (if $i < 0 then "-" else "" end) + ($a / $p | floor | tostring)
		  + (if $n > 0 then "." + ([range($n - ($f | length))] | map("0") | add // "") + $f else "" end)
	end;

# a verdict, from a comparison made on the unrounded figures
def met: if . then "met" else "NOT met" end;
