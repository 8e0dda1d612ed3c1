"""People in nine countries: names, addresses, postcodes, phone numbers and e-mail addresses.

Each `Country` spells them the way its sign-up forms do (house number before or after the street,
postcode formats, national and international phone spellings), with Zipf-skewed names and cities.
"""

from collections.abc import Callable

from sidecar.bench.events.primitives import Distribution, Rnd, words, zipf

__all__ = ["COUNTRIES", "COUNTRY", "Country", "email_address", "house"]


def _digits(rnd: Rnd, k: int) -> str:
    """``k`` uniformly random decimal digits, leading zeros kept."""
    return f"{int(rnd() * 10**k):0{k}d}"


def _letters(rnd: Rnd, k: int) -> str:
    """``k`` random upper-case ASCII letters."""
    return "".join([chr(65 + int(rnd() * 26)) for _ in range(k)])


def house(rnd: Rnd) -> int:
    """A house number: mostly below 60, sometimes in the low hundreds."""
    u = rnd()
    return 1 + int(u * 80) if u < 0.75 else 1 + int((u - 0.75) * (u - 0.75) * 4000)


def _phone(cc: str, leads: str, groups: tuple[int, ...], trunk: str) -> Callable[[Rnd], str]:
    """A mobile-number maker for one country; formats vary as in real sign-up forms.

    ``leads`` are comma-separated operator prefixes, ``groups`` the digit groups after them,
    ``trunk`` the national trunk prefix (``"0"`` or ``""``).
    """
    lead_values = leads.split(",")

    def phone(rnd: Rnd) -> str:
        lead = lead_values[int(rnd() * len(lead_values))]
        parts = [_digits(rnd, g) for g in groups]
        u = rnd()
        if u < 0.5:
            return f"+{cc} {lead} {' '.join(parts)}"
        if u < 0.75:
            return f"+{cc}{lead}{''.join(parts)}"
        return f"{trunk}{lead} {' '.join(parts)}"

    return phone


def _us_phone(rnd: Rnd) -> str:
    """A North American number in one of the three common spellings."""
    area, exchange, line = 201 + int(rnd() * 780), 200 + int(rnd() * 799), _digits(rnd, 4)
    u = rnd()
    if u < 0.45:
        return f"+1 {area}-{exchange}-{line}"
    if u < 0.8:
        return f"({area}) {exchange}-{line}"
    return f"+1{area}{exchange}{line}"


def _br_phone(rnd: Rnd) -> str:
    """A Brazilian mobile number, ``+55 11 91234-5678``."""
    ddd = ("11", "21", "31", "41", "51", "61", "71", "81")[int(rnd() * 8)]
    return f"+55 {ddd} 9{_digits(rnd, 4)}-{_digits(rnd, 4)}"


class Country:
    """Vocabulary and formats for customers living in one country."""

    __slots__ = (
        "apartment",
        "cities",
        "code",
        "domains",
        "first",
        "last",
        "locale",
        "phone",
        "postal",
        "street",
        "streets",
    )

    def __init__(
        self,
        code: str,
        locale: str,
        first: str,
        last: str,
        cities: str,
        streets: str,
        street: Callable[[str, int, Rnd], str],
        postal: Callable[[str, Rnd], str],
        phone: Callable[[Rnd], str],
        domains: str,
        apartment: Callable[[Rnd], str | None],
    ) -> None:
        self.code = code
        self.locale = locale
        self.first = zipf(first.split(","), shift=4.0)
        self.last = zipf(last.split(","), shift=4.0)
        self.cities = zipf(cities.split(","), shift=1.0)  # "City|postal prefix"
        self.streets = zipf(streets.split(","), shift=2.0)
        self.street = street
        self.postal = postal
        self.phone = phone
        self.domains = zipf(domains.split(","), shift=0.5)
        self.apartment = apartment


_GB_INWARD = "ABDEFGHJLNPQRSTUWXYZ"  # letters allowed in the inward half of a UK postcode


def _no_apartment(rnd: Rnd) -> str | None:
    return None


def _us_apartment(rnd: Rnd) -> str | None:
    u = rnd()
    if u < 0.12:
        return f"Apt {1 + int(u * 150)}{'ABCDEF'[int(rnd() * 6)]}"
    return f"Suite {100 + int(rnd() * 900)}" if u < 0.16 else None


def _es_apartment(rnd: Rnd) -> str | None:
    return f"{1 + int(rnd() * 9)}º {'ABCDI'[int(rnd() * 5)]}" if rnd() < 0.6 else None


def _br_apartment(rnd: Rnd) -> str | None:
    return f"apto {1 + int(rnd() * 20)}{int(rnd() * 4) + 1}" if rnd() < 0.35 else None


#: The countries customers live in, with their vocabularies and formats.
COUNTRIES: tuple[Country, ...] = (
    Country(
        "US",
        "en-US",
        "James,Mary,Michael,Jennifer,David,Emily,Daniel,Olivia,Christopher,Ashley,Jessica,"
        "Matthew,Sarah,Tyler,Madison,Brandon,Kayla,José,Aaliyah,Ethan,Megan,Kevin,Priya,Wei",
        "Smith,Johnson,Williams,Brown,Jones,Garcia,Miller,Davis,Rodriguez,Martinez,Wilson,"
        "Anderson,Taylor,Thomas,Nguyen,Lee,Patel,Kim,O'Brien,Hernandez,Washington,Cohen",
        "New York|100,Los Angeles|900,Chicago|606,Houston|770,Phoenix|850,Seattle|981,"
        "Austin|787,Denver|802,Boston|021,Atlanta|303,Portland|972,Columbus|432,San Diego|921,"
        "Minneapolis|554,Charlotte|282",
        "Main St,Oak Ave,Maple Dr,Cedar Ln,Elm St,Washington Blvd,Lake Shore Dr,Park Ave,"
        "Pine St,Sunset Blvd,Madison Ave,2nd St,5th Ave,Highland Rd,Broadway,Mill Creek Ct",
        lambda name, no, rnd: f"{no * 17 + int(rnd() * 17)} {name}",
        lambda prefix, rnd: (
            f"{prefix}{_digits(rnd, 2)}" + (f"-{_digits(rnd, 4)}" if rnd() < 0.1 else "")
        ),
        _us_phone,
        "gmail.com,yahoo.com,outlook.com,hotmail.com,icloud.com,aol.com,comcast.net,"
        "att.net,protonmail.com,me.com",
        _us_apartment,
    ),
    Country(
        "DE",
        "de-DE",
        "Lukas,Anna,Maximilian,Sophie,Jonas,Marie,Felix,Lena,Leon,Hannah,Jürgen,Jörg,Sabine,"
        "Thomas,Katrin,Özlem,Mehmet,Ursula,Stefan,Birgit",
        "Müller,Schmidt,Schneider,Fischer,Weber,Meyer,Wagner,Becker,Schulz,Hoffmann,Schäfer,"
        "Koch,Bauer,Richter,Klein,Wolf,Yılmaz,Schröder,Neumann,Zimmermann",
        "Berlin|10,Hamburg|20,München|80,Köln|50,Frankfurt am Main|60,Stuttgart|70,"
        "Düsseldorf|40,Leipzig|04,Dresden|01,Hannover|30,Nürnberg|90,Bremen|28",
        "Hauptstraße,Bahnhofstraße,Schulweg,Gartenstraße,Lindenallee,Goethestraße,"
        "Schillerstraße,Am Markt,Friedrich-Ebert-Straße,Mozartweg,Kirchplatz,Bergstraße,"
        "Waldstraße,Ringstraße",
        lambda name, no, rnd: f"{name} {no}" + ("a" if rnd() < 0.07 else ""),
        lambda prefix, rnd: f"{prefix}{_digits(rnd, 3)}",
        _phone("49", "151,152,157,160,170,171,176,177,179", (8,), "0"),
        "gmail.com,web.de,gmx.de,t-online.de,outlook.de,yahoo.de,gmx.net,posteo.de",
        _no_apartment,
    ),
    Country(
        "GB",
        "en-GB",
        "Oliver,Amelia,George,Isla,Harry,Ava,Jack,Mia,Charlie,Emily,Sophie,Thomas,Siobhan,"
        "Rhys,Aisha,Callum",
        "Smith,Jones,Taylor,Brown,Williams,Wilson,Johnson,Davies,Evans,Thomas,Roberts,Walker,"
        "Wright,Patel,Khan,McDonald",
        "London|SW,London|E,London|N,Manchester|M,Birmingham|B,Leeds|LS,Glasgow|G,"
        "Bristol|BS,Edinburgh|EH,Liverpool|L,Cardiff|CF,Sheffield|S",
        "High Street,Station Road,Church Lane,Victoria Road,Manor Close,Park Avenue,Queens Road,"
        "Kings Crescent,Mill Lane,The Green,Albert Gardens,Windsor Drive",
        lambda name, no, rnd: f"{no} {name}",
        lambda prefix, rnd: (
            f"{prefix}{1 + int(rnd() * 20)} {int(rnd() * 10)}"
            f"{_GB_INWARD[int(rnd() * 20)]}{_GB_INWARD[int(rnd() * 20)]}"
        ),
        _phone("44", "7700,7911,7481,7375,7412,7817", (6,), "0"),
        "gmail.com,hotmail.co.uk,yahoo.co.uk,outlook.com,btinternet.com,icloud.com,sky.com",
        _no_apartment,
    ),
    Country(
        "FR",
        "fr-FR",
        "Jean,Marie,Pierre,Camille,Lucas,Léa,Hugo,Chloé,Louis,Manon,Élodie,François,Théo,Inès,"
        "Nathalie,Mathieu",
        "Martin,Bernard,Dubois,Thomas,Robert,Richard,Petit,Durand,Leroy,Moreau,Lefèvre,Girard,"
        "Fontaine,Rousseau,Benali,Garnier",
        "Paris|75,Marseille|13,Lyon|69,Toulouse|31,Nice|06,Nantes|44,Bordeaux|33,Lille|59,"
        "Strasbourg|67,Montpellier|34,Rennes|35",
        "rue de la République,avenue Victor Hugo,boulevard Jean Jaurès,rue de la Paix,"
        "impasse des Lilas,rue Pasteur,avenue du Général de Gaulle,place Voltaire,"
        "chemin des Vignes,rue Nationale",
        lambda name, no, rnd: f"{no}{' bis' if rnd() < 0.05 else ''} {name}",
        lambda prefix, rnd: f"{prefix}{_digits(rnd, 3)}",
        _phone("33", "6,7", (2, 2, 2, 2), "0"),
        "gmail.com,orange.fr,hotmail.fr,free.fr,laposte.net,yahoo.fr,sfr.fr,wanadoo.fr",
        _no_apartment,
    ),
    Country(
        "ES",
        "es-ES",
        "María,José,Antonio,Lucía,Carmen,Javier,Pablo,Sofía,Alejandro,Paula,Sergio,Marta,"
        "Ángel,Nerea",
        "García,Fernández,González,Rodríguez,López,Martínez,Sánchez,Pérez,Gómez,Martín,Jiménez,"
        "Ruiz,Iglesias,Ortega",
        "Madrid|28,Barcelona|08,Valencia|46,Sevilla|41,Zaragoza|50,Málaga|29,Bilbao|48,"
        "Palma|07,Alicante|03",
        "Calle Mayor,Gran Vía,Calle de Alcalá,Calle Real,Avenida de la Constitución,"
        "Plaza del Sol,Calle San Juan,Calle de Serrano,Paseo de Gracia,Rambla de Catalunya",
        lambda name, no, rnd: f"{name}, {no}",
        lambda prefix, rnd: f"{prefix}{_digits(rnd, 3)}",
        _phone("34", "612,622,634,654,678,699,711", (3, 3), ""),
        "gmail.com,hotmail.com,yahoo.es,outlook.es,hotmail.es,telefonica.net",
        _es_apartment,
    ),
    Country(
        "IT",
        "it-IT",
        "Giuseppe,Giulia,Marco,Francesca,Alessandro,Chiara,Luca,Sara,Matteo,Martina,Niccolò,"
        "Federica,Andrea",
        "Rossi,Russo,Ferrari,Esposito,Bianchi,Romano,Colombo,Ricci,Marino,Greco,Bruno,"
        "De Luca,Conti",
        "Roma|001,Milano|201,Napoli|801,Torino|101,Bologna|401,Firenze|501,Palermo|901,"
        "Genova|161,Verona|371",
        "Via Roma,Via Garibaldi,Corso Vittorio Emanuele II,Via Giuseppe Mazzini,Piazza Dante,"
        "Via Cavour,Viale dei Mille,Via Verdi,Via del Corso,Via Nazionale",
        lambda name, no, rnd: f"{name} {no}",
        lambda prefix, rnd: f"{prefix}{_digits(rnd, 2)}",
        _phone("39", "320,328,333,340,347,349,366,393", (3, 4), ""),
        "gmail.com,libero.it,hotmail.it,yahoo.it,virgilio.it,alice.it,outlook.it,tiscali.it",
        _no_apartment,
    ),
    Country(
        "NL",
        "nl-NL",
        "Daan,Emma,Sem,Julia,Lucas,Mila,Bram,Sanne,Jeroen,Anouk,Femke,Thijs",
        "de Jong,Jansen,de Vries,van den Berg,van Dijk,Bakker,Visser,Smit,Meijer,de Boer,"
        "Mulder,Bos",
        "Amsterdam|10,Rotterdam|30,Den Haag|25,Utrecht|35,Eindhoven|56,Groningen|97,"
        "Haarlem|20,Nijmegen|65",
        "Kerkstraat,Dorpsstraat,Schoolstraat,Molenweg,Herengracht,Keizersgracht,Prinsengracht,"
        "Stationsweg,Julianalaan,Wilhelminastraat",
        lambda name, no, rnd: f"{name} {no}" + ("-2" if rnd() < 0.08 else ""),
        lambda prefix, rnd: f"{prefix}{_digits(rnd, 2)} {_letters(rnd, 2)}",
        _phone("31", "6", (8,), "0"),
        "gmail.com,hotmail.com,ziggo.nl,outlook.com,kpnmail.nl,live.nl,xs4all.nl",
        _no_apartment,
    ),
    Country(
        "BR",
        "pt-BR",
        "João,Maria,Gabriel,Ana,Lucas,Júlia,Pedro,Beatriz,Mateus,Larissa,Thiago,Fernanda",
        "Silva,Santos,Oliveira,Souza,Rodrigues,Ferreira,Alves,Pereira,Lima,Gomes,Costa,Ribeiro",
        "São Paulo|01,Rio de Janeiro|20,Belo Horizonte|30,Brasília|70,Curitiba|80,"
        "Porto Alegre|90,Salvador|40,Recife|50",
        "Rua Augusta,Rua das Flores,Rua XV de Novembro,Avenida Paulista,Rua Sete de Setembro,"
        "Avenida Santos Dumont,Rua Tiradentes,Avenida Brasil,Rua da Consolação,Rua Oscar Freire",
        lambda name, no, rnd: f"{name}, {no * 10 + int(rnd() * 10)}",
        lambda prefix, rnd: f"{prefix}{_digits(rnd, 3)}-{_digits(rnd, 3)}",
        _br_phone,
        "gmail.com,hotmail.com,outlook.com,yahoo.com.br,uol.com.br,bol.com.br,terra.com.br",
        _br_apartment,
    ),
    Country(
        "PL",
        "pl-PL",
        "Jakub,Zofia,Kacper,Julia,Szymon,Maja,Piotr,Agnieszka,Łukasz,Małgorzata,Tomasz,Anna",
        "Nowak,Kowalski,Wiśniewski,Wójcik,Kowalczyk,Kamiński,Lewandowski,Zieliński,Szymański,"
        "Woźniak,Dąbrowski,Mazur",
        "Warszawa|0,Kraków|3,Łódź|9,Wrocław|5,Poznań|6,Gdańsk|8,Szczecin|7,Lublin|2",
        "Marszałkowska,Długa,Polna,Kościuszki,Mickiewicza,Słowackiego,Piłsudskiego,Ogrodowa,"
        "Lipowa,Kwiatowa",
        lambda name, no, rnd: (
            f"ul. {name} {no}" + (f"/{1 + int(rnd() * 60)}" if rnd() < 0.45 else "")
        ),
        lambda prefix, rnd: f"{prefix}{_digits(rnd, 1)}-{_digits(rnd, 3)}",
        _phone("48", "500,512,533,601,667,692,721,798", (3, 3), ""),
        "gmail.com,wp.pl,onet.pl,o2.pl,interia.pl,op.pl,outlook.com",
        _no_apartment,
    ),
)
#: Where a customer lives: an index into `COUNTRIES`, the US most often.
COUNTRY = Distribution(
    [str(i) for i in range(len(COUNTRIES))], [30.0, 16.0, 12.0, 9.0, 7.0, 6.0, 4.0, 5.0, 3.0]
)

# Diacritics folded the way sign-up forms and mail providers do it.
_FOLD = str.maketrans(
    {
        **str.maketrans("áàâãåąéèêëęíìîïıóòôõøúùûñńçćśşźżł", "aaaaaaeeeeeiiiiiooooouuunnccsszzl"),
        ord("ä"): "ae",
        ord("ö"): "oe",
        ord("ü"): "ue",
        ord("ß"): "ss",
        ord("'"): None,
        ord(" "): None,
        ord("-"): None,
    }
)

_HANDLES: tuple[str, ...] = words(
    "sunny pixel rocket bluebird darkstar kitty gamer dreamer coolcat wanderer nightowl foxy tiger "
    "skater lucky shadow"
)


def email_address(rnd: Rnd, first: str, last: str, country: Country, birth_year: int) -> str:
    """An address built the way people pick them: name patterns, digits, handles."""
    f = first.lower().translate(_FOLD)
    la = last.lower().translate(_FOLD)
    u = rnd()
    if u < 0.30:
        local = f"{f}.{la}"
    elif u < 0.42:
        local = f + la
    elif u < 0.53:
        local = f[0] + la
    elif u < 0.63:
        local = f"{f}.{la}{birth_year % 100:02d}"
    elif u < 0.72:
        local = f + str(1 + int(rnd() * rnd() * 999))
    elif u < 0.77:
        local = f"{la}.{f}"
    elif u < 0.82:
        local = f"{f}_{la}"
    elif u < 0.88:
        local = f"{f}{la[0]}{birth_year}"
    else:
        local = _HANDLES[int(rnd() * len(_HANDLES))] + str(int(rnd() * 10_000))
    return f"{local}@{country.domains.pick(rnd())}"
